"""``--manager vllm``: the KV cache manager of the vLLM release ``--target`` names.

``vllm==X.Y.Z`` and ``vllm@PATH`` load the manager's files in isolation with the pool's
(a release's are cached, the first time, in a folder of their own beside the pool's:
``vllm-manager/X.Y.Z``); ``vllm`` imports the installed vLLM's. A release whose manager
the suite cannot drive is refused, and the message says which call or file it lacks.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from .manager_api import ManagerUnsupported, check_manager, manager_api
from .naming import VllmLoadError, installed_vllm_version, shown_name

if TYPE_CHECKING:
    from ...manager.target import ManagerTargetFactory
    from ..description import TargetDescription


def load_vllm_manager(target: TargetDescription) -> tuple[ManagerTargetFactory, str]:
    """The factory of manager targets for ``--manager vllm`` (the manager of the vLLM
    ``target`` names) and its display name."""
    from ..description import Form
    from .distribution import MANAGER_CACHE, cached_release, seed_cache
    from .isolation import IsolationError, load_release
    from .releases import (
        MANAGER_MODULES,
        MANAGER_WHEEL_MEMBERS,
        MODULES,
        ReleaseError,
        check_supported,
        version_in_tree,
    )
    from .target import describe

    modules: Mapping[str, ModuleType]
    try:
        if target.form is Form.INSTALLED:
            modules = _installed_modules({**MODULES, **MANAGER_MODULES})
            version, origin = installed_vllm_version(), "installed"
        else:
            if target.form is Form.RELEASE:
                version = target.version or ""
                check_supported(version)
                root = cached_release(version, folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS)
            else:
                path = (target.path or Path()).expanduser()
                if not path.exists():
                    raise VllmLoadError(f"{target.text}: {path} does not exist")
                root = (
                    seed_cache(path, folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS)
                    if path.is_file()
                    else path
                )
                version = root.name if path.is_file() else version_in_tree(root)
            release = load_release(root, version, manager=True)
            modules, origin = release.modules, f"isolated from {root}"
        described = describe(version, modules, origin)
        check_manager(version, modules)
    except ManagerUnsupported as exc:
        raise VllmLoadError(f"--manager vllm: {exc}") from exc
    except (ReleaseError, IsolationError, ValueError) as exc:
        raise VllmLoadError(f"--manager vllm for {target.text}: {exc}") from exc
    from .manager_target import manager_factory

    shown = f"{shown_name(target, described.version)} KVCacheManager"
    # named "vllm" in tables and traces, so that a trace replays with --manager vllm
    return manager_factory(modules, described.api(), manager_api(modules), shown), "vllm"


def _installed_modules(names: Mapping[str, str]) -> dict[str, ModuleType]:
    """The installed vLLM's modules of ``names`` (importing vLLM, and torch with it)."""
    modules = {}
    for name in names:
        try:
            modules[name] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # a file this release does not have; check_manager decides
            raise VllmLoadError(f"importing the installed vLLM's {name} failed: {exc}") from exc
        except Exception as exc:  # vLLM's own import failed (a missing dependency, ...)
            raise VllmLoadError(
                f"importing the installed vLLM's {name} failed: {type(exc).__name__}: {exc}"
            ) from exc
    return modules


#: What ``--manager vllm`` is, for ``kvpool targets``.
DESCRIPTION = (
    "the KV cache manager of the vLLM release --target names (vllm==X.Y.Z, vllm@PATH, "
    "vllm): its own KVCacheManager, coordinator and single-type managers"
)


def manager_offer(version: str) -> str:
    """Whether release ``version`` offers ``--manager vllm``, from the cache alone (nothing
    is downloaded): ``yes``, ``no: why``, or that its manager files are not cached yet."""
    from .distribution import MANAGER_CACHE, WheelError, cached_release
    from .isolation import IsolationError, load_release
    from .releases import MANAGER_WHEEL_MEMBERS, ReleaseError

    try:
        root = cached_release(
            version, download=False, folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS
        )
    except WheelError:
        return "not cached yet (the first --manager vllm run fetches and checks it)"
    except ReleaseError as exc:
        return f"no: {exc}"
    try:
        release = load_release(root, version, manager=True)
        check_manager(version, release.modules)
    except ManagerUnsupported as exc:
        return f"no: {exc}"
    except (ReleaseError, IsolationError) as exc:
        return f"no: {exc}"
    api = manager_api(release.modules)
    details = [
        name
        for name, present in (
            ("copy-on-write copies", api.copies),
            ("evict_blocks", api.evicts),
            ("groups of one spec", api.identical_groups),
        )
        if not present
    ]
    return "yes" + (f" (without {', '.join(details)})" if details else "")
