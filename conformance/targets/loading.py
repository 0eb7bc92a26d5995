"""Turning ``--target`` into a factory of targets.

- ``impl`` — this project's linked-list pool (the default);
- ``spec`` — the spec itself (a self-check);
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
from typing import Any

from kvpool.spec import PoolConfig, Profile

from ..manager.target import ManagerTarget, ManagerTargetFactory, RequestSetup
from ..target import Target, TargetFactory
from .spec_target import SpecTarget
from .vllm_api import VllmApiTarget


class TargetLoadError(Exception):
    """``--target`` names nothing that can be loaded; the message says what to fix."""


def impl_target(config: PoolConfig, profile: Profile) -> Target:
    from kvpool.impl import BlockPool

    return VllmApiTarget(BlockPool, config, profile, name="impl")


def spec_target(config: PoolConfig, profile: Profile) -> Target:
    return SpecTarget(config, profile)


BUILT_IN: dict[str, tuple[TargetFactory, str]] = {
    "impl": (impl_target, "kvpool's own linked-list BlockPool (kvpool.impl)"),
    "spec": (spec_target, "the executable spec itself (a self-check; always conforms)"),
}


def _impl_manager(setup: RequestSetup, profile: Profile) -> ManagerTarget:
    from .impl_manager import impl_manager_target

    return impl_manager_target(setup, profile)


#: Targets whose package also ships a KV cache manager, checked by the request machine.
BUILT_IN_MANAGERS: dict[str, tuple[ManagerTargetFactory, str]] = {
    "impl": (_impl_manager, "kvpool's own KVCacheManager over its BlockPool"),
}


def load_manager(value: str, target: str) -> tuple[ManagerTargetFactory | None, str]:
    """The manager factory for ``--manager``: ``auto`` (the target's own manager, if it
    ships one), ``none``, a built-in name, or ``module:factory`` called as
    ``factory(setup, profile)`` and returning a manager target."""
    if value == "none":
        return None, "none"
    if value == "auto":
        value = target if target in BUILT_IN_MANAGERS else "none"
        if value == "none":
            return None, "none"
    if value in BUILT_IN_MANAGERS:
        return BUILT_IN_MANAGERS[value][0], value
    if ":" not in value:
        known = ", ".join(["auto", "none", *BUILT_IN_MANAGERS])
        raise TargetLoadError(
            f"unknown manager {value!r}: use one of {known}, or module:factory for your own"
        )
    factory = _import_attribute(value)
    return factory, value


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


def load_target(spec: str) -> tuple[TargetFactory, str]:
    """The factory and display name for a ``--target`` value."""
    if spec in BUILT_IN:
        return BUILT_IN[spec][0], spec
    if ":" not in spec:
        known = ", ".join(BUILT_IN)
        raise TargetLoadError(
            f"unknown target {spec!r}: use one of {known}, or module:factory for your own pool"
        )
    factory = _import_attribute(spec)
    if takes_config(factory):
        return factory, spec

    def wrapped(config: PoolConfig, profile: Profile) -> Target:
        return VllmApiTarget(factory, config, profile, name=spec)

    return wrapped, spec
