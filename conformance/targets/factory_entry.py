"""``module:factory``: anyone's pool or manager, imported from the module the command line
names.

As a pool, ``factory`` is either a Target class / a callable with a ``config`` parameter
(called as ``factory(config, profile)``), or a callable building a pool with vLLM's
``BlockPool`` API (called as ``factory(num_gpu_blocks=..., enable_caching=...,
hash_block_size=..., enable_kv_cache_events=...)``), which the suite wraps itself. As a
manager it is called as ``factory(setup, profile)`` and returns a manager target.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvpool.spec import PoolConfig, Profile

from ..machines.pool.target import Target, TargetFactory
from ..machines.requests.target import ManagerTargetFactory
from .description import Form, TargetDescription
from .errors import TargetLoadError
from .registry import EngineEntry

#: The keyword arguments a ``module:factory`` pool is built with (vLLM's BlockPool's).
POOL_KEYWORDS = ("num_gpu_blocks", "enable_caching", "hash_block_size", "enable_kv_cache_events")


def import_attribute(spec: str) -> Any:
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


class FactoryEntry(EngineEntry):
    """The ``module:factory`` form: not a registered engine, but loaded the same way."""

    name = "module:factory"
    summary = "your own pool (see kvpool conform --help) or manager target"
    forms = MappingProxyType(
        {"module:factory": "your own pool or manager: a factory the suite imports"}
    )
    accepted = frozenset({Form.FACTORY})

    def load_pool(self, described: TargetDescription) -> tuple[TargetFactory, str]:
        spec = described.text
        factory = import_attribute(spec)
        if takes_config(factory):
            built: TargetFactory = factory
            return built, spec
        missing = keywords_not_taken(factory)
        if missing:
            raise TargetLoadError(
                f"{spec!r} cannot take {', '.join(missing)}: the suite builds every pool as "
                f"{spec.partition(':')[2]}({', '.join(k + '=...' for k in POOL_KEYWORDS)}); "
                "add the missing parameters (or **kwargs) to its signature, or give it a "
                "config parameter to build a Target yourself"
            )
        from ..engines.vllm_api.adapter import VllmApiTarget

        def wrapped(config: PoolConfig, profile: Profile) -> Target:
            return VllmApiTarget(factory, config, profile, name=spec)

        return wrapped, spec

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        factory: ManagerTargetFactory = import_attribute(described.text)
        return factory, described.text


FACTORY = FactoryEntry()
