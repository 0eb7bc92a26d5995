"""``--manager vllm`` (``--manager aphrodite``, any vLLM fork's): the KV cache manager of
the vLLM-shaped release ``--target`` names, under its own top-level package.

``vllm==X.Y.Z`` (``aphrodite==X.Y.Z``) and ``vllm@PATH`` load the manager's files in
isolation with the pool's (a release's are cached, the first time, in a folder of their
own beside the pool's: ``vllm-manager/X.Y.Z``, ``aphrodite-manager/X.Y.Z``); a tree finds
its package by its own name (``aphrodite/v1/core/kv_cache_manager.py``) or takes
``--package NAME``, as the pool does; ``vllm`` imports the installed package's. A release
whose manager the suite cannot drive is refused, and the message says which call or file
it lacks.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from .manager_api import ManagerUnsupported, check_manager, manager_api
from .naming import VllmLoadError, shown_name
from .package import own_name

if TYPE_CHECKING:
    from ...machines.requests.target import ManagerTargetFactory
    from ...targets.description import TargetDescription
    from .distribution import Distribution


def load_vllm_manager(
    target: TargetDescription, dist: Distribution, package: str
) -> tuple[ManagerTargetFactory, str]:
    """The factory of manager targets for the manager of the vLLM-shaped release
    ``target`` names (its files from ``dist``'s releases, in top-level ``package``), and
    the name its traces replay by (the engine's: ``vllm``, ``aphrodite``)."""
    from ...targets.description import Form
    from .distribution import (
        MANAGER_CACHE,
        cached_release,
        installed_version,
        seed_cache,
        version_in_tree,
    )
    from .isolation import IsolationError, load_release
    from .package import package_in
    from .releases import MANAGER_MODULES, MANAGER_WHEEL_MEMBERS, MODULES, ReleaseError
    from .target import describe

    word = f"--manager {target.engine}"
    modules: Mapping[str, ModuleType]
    try:
        if target.form is Form.INSTALLED:
            version = installed_version(dist)
            modules = _installed_modules({**MODULES, **MANAGER_MODULES}, dist)
            origin = "installed"
        else:
            if target.form is Form.RELEASE:
                version = target.version or ""
                root = cached_release(
                    version, folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS, dist=dist
                )
            else:
                path = (target.path or Path()).expanduser()
                if not path.exists():
                    raise VllmLoadError(f"{target.text}: {path} does not exist")
                if path.is_file():
                    root = seed_cache(
                        path, folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS, dist=dist
                    )
                    version = root.name
                else:
                    root = path
                    package = package_in(root, target.package)
                    version = version_in_tree(root, package)
            release = load_release(root, version, manager=True, package=package)
            modules, origin = release.modules, f"isolated from {root}"
        described = describe(version, modules, origin)
        check_manager(f"{dist.label} {version}", modules)
    except ManagerUnsupported as exc:
        raise VllmLoadError(f"{word}: {exc}") from exc
    except (ReleaseError, IsolationError, ValueError) as exc:
        raise VllmLoadError(f"{word} for {target.text}: {exc}") from exc
    from .manager_target import manager_factory

    shown = f"{shown_name(target, described.version)} KVCacheManager"
    # named after the engine in tables and traces, so that a trace replays with --manager
    # vllm (aphrodite, ...) beside the same --target
    return manager_factory(modules, described.api(), manager_api(modules), shown), target.engine


def _installed_modules(roles: Mapping[str, str], dist: Distribution) -> dict[str, ModuleType]:
    """The installed package's modules of ``roles`` (vLLM's names), imported under their
    own names (importing the package, and torch with it), keyed by vLLM's names."""
    modules = {}
    for role in roles:
        name = own_name(role, dist.package)
        try:
            modules[role] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # a file this release does not have; check_manager decides
            raise VllmLoadError(f"importing the installed {name} failed: {exc}") from exc
        except Exception as exc:  # the package's own import failed (a missing dependency)
            raise VllmLoadError(
                f"importing the installed {name} failed: {type(exc).__name__}: {exc}"
            ) from exc
    return modules


def manager_offer(version: str) -> str:
    """Whether vLLM release ``version`` offers ``--manager vllm``, from the cache alone
    (nothing is downloaded): ``yes``, ``no: why``, or that its manager files are not cached
    yet."""
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
        check_manager(f"vLLM {version}", release.modules)
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
