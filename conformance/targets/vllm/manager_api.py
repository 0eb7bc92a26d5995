"""Whether a release's ``KVCacheManager`` speaks the calls the manager adapter makes, and
how (its API generation).

The adapter (:mod:`.manager_target`) drives the manager the way vLLM's scheduler does.
What it needs is read off the release's signatures, not its version number, so a release
is refused with the exact call or file it lacks. Where releases differ by design the
adapter follows :class:`ManagerApi`:

- ``get_computed_blocks`` answers ``(blocks, hit tokens, shared-prefix boundary)`` from
  0.33 on, ``(blocks, hit tokens)`` before;
- ``remove_skipped_blocks`` takes the prompt length from 0.33 on (for R-SWA);
- ``take_kv_cache_block_copies`` (a partial hit's copy-on-write, from 0.33 on);
- ``evict_blocks`` (from 0.24 on): without it, ``evict_cached`` is not drawn;
- two KV-cache groups of one spec (0.30 on): 0.24's hybrid coordinator requires groups of
  distinct specs (its config builder puts identical layers in one group), so there the
  groups are written with distinct head sizes, which the manager never reads otherwise.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType

#: The modules the adapter reads (beyond the pool's).
NEEDED_MODULES = (
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.core.kv_cache_coordinator",
    "vllm.v1.core.single_type_kv_cache_manager",
    "vllm.v1.kv_cache_interface",
)

#: Where the hash functions live from 0.11 on; before, in ``vllm/utils/__init__.py``,
#: which pulls in most of vLLM and is never loaded in isolation.
HASHING = "vllm.utils.hashing"

#: Manager method -> the parameters the adapter passes it by name.
NEEDED_CALLS: dict[str, tuple[str, ...]] = {
    "__init__": ("kv_cache_config", "max_model_len", "enable_caching", "enable_kv_cache_events"),
    "get_computed_blocks": ("request",),
    "allocate_slots": (
        "request",
        "num_new_tokens",
        "num_new_computed_tokens",
        "new_computed_blocks",
        "delay_cache_blocks",
    ),
    "cache_blocks": ("request", "num_computed_tokens"),
    "remove_skipped_blocks": ("request_id",),
    "free": ("request",),
    "reset_prefix_cache": (),
    "get_block_ids": ("request_id",),
}


@dataclass(frozen=True)
class ManagerApi:
    """How one release's manager is called where generations differ."""

    #: ``remove_skipped_blocks`` takes ``num_prompt_tokens``.
    skipped_take_prompt: bool
    #: ``take_kv_cache_block_copies`` exists (copy-on-write of partial hits).
    copies: bool
    #: ``evict_blocks`` exists.
    evicts: bool
    #: Two groups may share one spec (else each group gets its own head size).
    identical_groups: bool = True


def manager_api(modules: Mapping[str, ModuleType]) -> ManagerApi:
    """The generation of the release's manager (call :func:`check_manager` first)."""
    manager = modules["vllm.v1.core.kv_cache_manager"].KVCacheManager
    skipped = _parameters(manager.remove_skipped_blocks) or set()
    return ManagerApi(
        skipped_take_prompt="num_prompt_tokens" in skipped,
        copies=callable(getattr(manager, "take_kv_cache_block_copies", None)),
        evicts=callable(getattr(manager, "evict_blocks", None)),
        identical_groups=_takes_identical_groups(modules),
    )


def _takes_identical_groups(modules: Mapping[str, ModuleType]) -> bool:
    """Whether the release builds a manager over two full-attention groups of one spec
    (tried on a four-block pool)."""
    from kvpool.spec import PoolConfig
    from kvpool.spec.manager import FULL_ATTENTION, ManagerConfig

    from ...manager.target import RequestSetup
    from .manager_target import build_manager

    setup = RequestSetup(ManagerConfig(1, (FULL_ATTENTION,) * 2), PoolConfig(4))
    try:
        build_manager(modules, setup, distinct_heads=False)
    except AssertionError:
        return False
    return True


class ManagerUnsupported(Exception):
    """The release's KV cache manager cannot be driven; the message says why."""


def _parameters(function: Callable[..., object]) -> set[str] | None:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None


def manager_problems(modules: Mapping[str, ModuleType]) -> list[str]:
    """What the release lacks for the adapter (empty when it can be driven)."""
    missing = [m for m in NEEDED_MODULES if m not in modules]
    if missing:
        return [f"no {', '.join(missing)}"]
    manager = getattr(modules["vllm.v1.core.kv_cache_manager"], "KVCacheManager", None)
    if not isinstance(manager, type):
        return ["kv_cache_manager.py has no KVCacheManager class"]
    problems = []
    for method, wanted in NEEDED_CALLS.items():
        function = getattr(manager, method, None)
        if function is None:
            problems.append(f"KVCacheManager has no {method}()")
            continue
        taken = _parameters(function)
        lacking = [p for p in wanted if taken is not None and p not in taken]
        if lacking:
            problems.append(f"KVCacheManager.{method}() takes no {', '.join(lacking)}")
    utils = modules.get("vllm.v1.core.kv_cache_utils")
    if utils is None or not hasattr(utils, "get_request_block_hasher"):
        problems.append("kv_cache_utils.py has no get_request_block_hasher()")
    if HASHING not in modules:
        problems.append(
            "no vllm/utils/hashing.py: its hash functions (and cdiv) live in "
            "vllm/utils/__init__.py, which is never loaded in isolation"
        )
    return problems


def check_manager(version: str, modules: Mapping[str, ModuleType]) -> None:
    """Raise :class:`ManagerUnsupported` naming what vLLM ``version`` lacks."""
    problems = manager_problems(modules)
    if problems:
        raise ManagerUnsupported(
            f"vLLM {version}'s KV cache manager cannot be driven by the suite's adapter: "
            f"{'; '.join(problems)}"
        )
