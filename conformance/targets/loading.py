"""Turning ``--target`` into a factory of targets.

- ``impl`` — this project's linked-list pool (the default);
- ``spec`` — the spec itself (a self-check);
- ``vllm`` — the vLLM installed in this environment (its block-pool modules, imported
  normally); ``vllm==X.Y.Z`` — a released vLLM, downloaded once into the user's cache (no
  dependencies; only its block-pool files are kept) and loaded in isolation, without
  importing vLLM or torch; ``vllm@PATH`` — a vLLM source tree or unpacked wheel (PATH holds
  ``vllm/v1/core/block_pool.py``) or a wheel file, loaded the same way;
- ``module:factory`` — anyone's pool. ``factory`` is either a Target class / a callable
  with a ``config`` parameter (called as ``factory(config, profile)``), or a callable
  building a pool with vLLM's ``BlockPool`` API (called as ``factory(num_gpu_blocks=...,
  enable_caching=..., hash_block_size=..., enable_kv_cache_events=...)``), which the suite
  wraps itself.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpool.spec import PoolConfig, Profile

from ..engine.target import Target, TargetFactory
from ..manager.target import ManagerTarget, ManagerTargetFactory, RequestSetup
from .engines import (
    ENGINE_SPECS,
    EngineLoadError,
    engine_profile,
    is_engine_spec,
    is_manager_target,
    load_engine_manager,
    load_engine_target,
    load_lmdeploy_manager,
)
from .spec_target import SpecTarget
from .vllm.naming import VllmLoadError, installed_vllm_version, is_vllm_spec, vllm_target_name
from .vllm_api.adapter import VllmApiTarget

if TYPE_CHECKING:
    from .vllm.target import VllmRelease


class TargetLoadError(Exception):
    """``--target`` names nothing that can be loaded; the message says what to fix."""


def impl_target(config: PoolConfig, profile: Profile) -> Target:
    from kvpool.impl import BlockPool

    return VllmApiTarget(BlockPool, config, profile, name="impl")


def spec_target(config: PoolConfig, profile: Profile) -> Target:
    return SpecTarget(config, profile)


def vllm_mlx_target(config: PoolConfig, profile: Profile) -> Target:
    from .vllm_mlx import vllm_mlx_target as build

    return build(config, profile)


BUILT_IN: dict[str, tuple[TargetFactory, str]] = {
    "impl": (impl_target, "kvpool's own linked-list BlockPool (kvpool.impl)"),
    "spec": (spec_target, "the executable spec itself (a self-check; always conforms)"),
    "vllm-mlx": (
        vllm_mlx_target,
        "vllm-mlx's PagedCacheManager (pip install --no-deps vllm-mlx==0.6.0); profile vllm-mlx",
    ),
}

#: The profile a built-in target is checked with unless ``--profile`` says otherwise.
BUILT_IN_PROFILES = {"vllm-mlx": "vllm-mlx"}


def _impl_manager(setup: RequestSetup, profile: Profile) -> ManagerTarget:
    from .impl_manager import impl_manager_target

    return impl_manager_target(setup, profile)


#: Targets whose package also ships a KV cache manager, checked by the request machine.
BUILT_IN_MANAGERS: dict[str, tuple[ManagerTargetFactory, str]] = {
    "impl": (_impl_manager, "kvpool's own KVCacheManager over its BlockPool"),
}


def load_manager(value: str, target: str) -> tuple[ManagerTargetFactory | None, str]:
    """The manager factory for ``--manager``: ``auto`` (the target's own manager, if it
    ships one: an LMDeploy release's is its block manager with the prefix trie), ``none``,
    a built-in name, ``vllm`` (the ``KVCacheManager`` of the vLLM release ``target``
    names), ``lmdeploy`` (the same for an LMDeploy target) or an LMDeploy form
    (``lmdeploy==X.Y.Z``, ``lmdeploy@PATH``), or ``module:factory`` called as
    ``factory(setup, profile)`` and returning a manager target."""
    if value == "none":
        return None, "none"
    if value == "auto":
        if is_engine_spec(target):
            return _lmdeploy_manager_if_any(target)
        owns = target in BUILT_IN_MANAGERS or is_manager_target(target)
        value = target if owns else "none"
        if value == "none":
            return None, "none"
    if value == "lmdeploy" and is_engine_spec(target):
        value = target  # the block manager of the LMDeploy release --target names
    if is_engine_spec(value):
        try:
            return load_lmdeploy_manager(value)
        except EngineLoadError as exc:
            raise TargetLoadError(str(exc)) from exc
    if is_manager_target(value):
        try:
            return load_engine_manager(value)
        except EngineLoadError as exc:
            raise TargetLoadError(str(exc)) from exc
    if value in BUILT_IN_MANAGERS:
        return BUILT_IN_MANAGERS[value][0], value
    if value == "vllm":
        from .vllm.manager_loading import load_vllm_manager

        try:
            return load_vllm_manager(target)
        except VllmLoadError as exc:
            raise TargetLoadError(str(exc)) from exc
    if ":" not in value:
        known = ", ".join(["auto", "none", *BUILT_IN_MANAGERS, "vllm", "lmdeploy"])
        raise TargetLoadError(
            f"unknown manager {value!r}: use one of {known}, or module:factory for your own"
        )
    factory = _import_attribute(value)
    return factory, value


def _lmdeploy_manager_if_any(target: str) -> tuple[ManagerTargetFactory | None, str]:
    """``--manager auto`` on an LMDeploy target: its block manager with the prefix trie, or
    none when the release or tree lacks the files of that layout (an older one: its pool
    is still checked), the reason in the name."""
    try:
        return load_lmdeploy_manager(target)
    except EngineLoadError as exc:
        return None, f"none ({str(exc).splitlines()[0]})"


def _import_attribute(spec: str) -> Any:
    """The callable ``module:attr.path`` names; errors say what to fix."""
    module_name, _, attr = spec.partition(":")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import error of the user's module, whatever it is
        raise TargetLoadError(
            f"cannot import module {module_name!r} for {spec!r}: {type(exc).__name__}: {exc}"
        ) from exc
    found: Any = module
    for part in attr.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise TargetLoadError(f"module {module_name!r} has no attribute {attr!r}")
    if not callable(found):
        raise TargetLoadError(f"{spec!r} is not callable")
    return found


def takes_config(factory: Callable[..., Any]) -> bool:
    """Whether ``factory`` builds a Target from ``(config, profile)``."""
    if inspect.isclass(factory) and all(
        hasattr(factory, m) for m in ("apply", "view", "structure_problems")
    ):
        return True
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return "config" in parameters


#: The keyword arguments a ``module:factory`` pool is built with (vLLM's BlockPool's).
POOL_KEYWORDS = ("num_gpu_blocks", "enable_caching", "hash_block_size", "enable_kv_cache_events")


def keywords_not_taken(factory: Callable[..., Any]) -> list[str]:
    """Those of :data:`POOL_KEYWORDS` that ``factory`` cannot be passed by name (none if
    its signature cannot be read or it takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [k for k in POOL_KEYWORDS if k not in parameters or parameters[k].kind not in by_name]


def load_target(spec: str) -> tuple[TargetFactory, str]:
    """The factory and display name for a ``--target`` value."""
    if spec in BUILT_IN:
        return BUILT_IN[spec][0], spec
    if is_manager_target(spec):
        raise TargetLoadError(
            f"{spec} is a KV cache manager with no pool API of its own: check it with "
            f"--machine requests (its manager run), or --manager {spec} beside a pool"
        )
    if is_engine_spec(spec):
        try:
            return load_engine_target(spec)
        except EngineLoadError as exc:
            raise TargetLoadError(str(exc)) from exc
    if is_vllm_spec(spec):
        release = load_vllm(spec)
        name = vllm_target_name(spec, release)
        try:
            return release.target_factory(name), name
        except Exception as exc:  # the release's pool cannot even be built and probed
            raise TargetLoadError(
                f"{spec}: vLLM {release.version}'s BlockPool ({release.origin}) could not be "
                f"built: {type(exc).__name__}: {exc}"
            ) from exc
    if ":" not in spec:
        known = ", ".join([*BUILT_IN, *VLLM_SPECS, *ENGINE_SPECS])
        raise TargetLoadError(
            f"unknown target {spec!r}: use one of {known}, or module:factory for your own pool"
        )
    factory = _import_attribute(spec)
    if takes_config(factory):
        return factory, spec
    missing = keywords_not_taken(factory)
    if missing:
        raise TargetLoadError(
            f"{spec!r} cannot take {', '.join(missing)}: the suite builds every pool as "
            f"{spec.partition(':')[2]}({', '.join(k + '=...' for k in POOL_KEYWORDS)}); "
            "add the missing parameters (or **kwargs) to its signature, or give it a "
            "config parameter to build a Target yourself"
        )

    def wrapped(config: PoolConfig, profile: Profile) -> Target:
        return VllmApiTarget(factory, config, profile, name=spec)

    return wrapped, spec


# --- vLLM -------------------------------------------------------------------------------

#: The vLLM target forms, for messages and ``kvpool targets``.
VLLM_SPECS: dict[str, str] = {
    "vllm": "the vLLM installed in this environment (its block-pool modules)",
    "vllm==X.Y.Z": "a released vLLM's BlockPool, downloaded once into the cache "
    "(no vLLM, torch or GPU needed)",
    "vllm@PATH": "a vLLM source tree, unpacked wheel or wheel file at PATH",
}


def vllm_version(spec: str) -> str | None:
    """The release a vLLM target names, without loading it: ``"0.33.0"`` for
    ``vllm==0.33.0``, the installed distribution's version for ``vllm``, what PATH's files
    say for ``vllm@PATH`` (``None`` when they say nothing). ``None`` for other targets."""
    from .vllm.releases import ReleaseError, parse_version, version_in_tree
    from .vllm.wheel import wheel_version

    if not is_vllm_spec(spec):
        return None
    try:
        if spec.startswith("vllm=="):
            version = spec.removeprefix("vllm==")
            parse_version(version)
            return version
        if spec == "vllm":
            return _installed_vllm_version()
        path = Path(spec.removeprefix("vllm@")).expanduser()
        if path.suffix == ".whl":
            return wheel_version(path)
        found = version_in_tree(path)
        return None if found == "unknown" else found
    except ReleaseError as exc:
        raise TargetLoadError(str(exc)) from exc


def default_profile(target_spec: str) -> str | None:
    """The profile a target is checked against unless ``--profile`` says otherwise: the
    measured profile of its release for a vLLM target (of its code, for a tree naming no
    version: :mod:`.vllm.profile_choice`), ``None`` for every other target."""
    from .vllm.profile_choice import choose_profile

    if target_spec in BUILT_IN_PROFILES:
        return BUILT_IN_PROFILES[target_spec]
    if is_engine_spec(target_spec):
        return engine_profile(target_spec)
    if not is_vllm_spec(target_spec):
        return None
    try:  # from its version, else measured on its code (a clone names no version)
        version = vllm_version(target_spec)
        return choose_profile(target_spec, version, lambda: load_vllm(target_spec)).profile
    except ValueError as exc:
        raise TargetLoadError(str(exc)) from exc


def load_vllm(spec: str) -> VllmRelease:
    """Load the vLLM release ``spec`` names; :class:`TargetLoadError` says what went wrong
    and what to run instead."""
    from .vllm.isolation import IsolationError, load_release
    from .vllm.releases import ReleaseError, check_supported, version_in_tree
    from .vllm.target import describe_release
    from .vllm.wheel import cached_release, seed_cache

    try:
        if spec == "vllm":
            return _installed_vllm()
        if spec.startswith("vllm=="):
            version = spec.removeprefix("vllm==")
            check_supported(version)
            return describe_release(load_release(cached_release(version), version))
        path = Path(spec.removeprefix("vllm@")).expanduser()
        if not path.exists():
            raise TargetLoadError(f"{spec}: {path} does not exist")
        if path.is_file():
            root = seed_cache(path)
            version = root.name
        else:
            root = path
            version = version_in_tree(root)
            if version != "unknown":
                check_supported(version)
        return describe_release(load_release(root, version))
    except (ReleaseError, IsolationError, ValueError) as exc:
        raise TargetLoadError(f"{spec}: {exc}") from exc


def _installed_vllm_version() -> str:
    try:
        return installed_vllm_version()
    except VllmLoadError as exc:
        raise TargetLoadError(str(exc)) from None


def _installed_vllm() -> VllmRelease:
    """The installed vLLM's block-pool modules, imported normally (this imports vLLM)."""
    from .vllm.releases import MODULES
    from .vllm.target import describe

    version = _installed_vllm_version()
    modules = {}
    for name in MODULES:
        try:
            modules[name] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # an optional module this release does not have
            raise TargetLoadError(f"importing the installed vLLM's {name} failed: {exc}") from exc
        except Exception as exc:  # vLLM's own import failed (a missing dependency, ...)
            raise TargetLoadError(
                f"importing the installed vLLM's {name} failed: {type(exc).__name__}: {exc}"
            ) from exc
    return describe(version, modules, "installed")
