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
  groups are written with distinct head sizes, which the manager never reads otherwise;
- before 0.11 the manager has no ``remove_skipped_blocks``: sliding windows are freed by
  the coordinator's ``remove_skipped_blocks``, which ``allocate_slots`` calls at the
  request's next step; the adapter makes that same call after the forward pass. Its hash
  functions live in ``vllm/utils/__init__.py`` (never loaded): its block hasher is given
  the suite's own SHA-256 (keys are compared through a pairing anyway).
"""

from __future__ import annotations

import hashlib
import inspect
import pickle
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
#: The release's hash function the adapter uses (vLLM's default ``prefix_caching_hash_algo``).
HASH_ALGORITHM = "sha256"

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
    "free": ("request",),
    "reset_prefix_cache": (),
    "get_block_ids": ("request_id",),
}


@dataclass(frozen=True)
class ManagerApi:
    """How one release's manager is called where generations differ."""

    #: ``remove_skipped_blocks`` takes ``num_prompt_tokens``.
    skipped_take_prompt: bool
    #: The manager has ``remove_skipped_blocks`` (else its coordinator's is called).
    skipped_on_manager: bool
    #: ``take_kv_cache_block_copies`` exists (copy-on-write of partial hits).
    copies: bool
    #: ``evict_blocks`` exists.
    evicts: bool
    #: Two full-attention groups may share one spec (else each gets its own head size).
    identical_groups: bool = True
    #: Two full-attention groups can be built at all (0.10's hybrid coordinator takes
    #: exactly one full-attention type and one other; there a second one is left out).
    two_full_groups: bool = True


def manager_api(modules: Mapping[str, ModuleType]) -> ManagerApi:
    """The generation of the release's manager (call :func:`check_manager` first)."""
    manager = modules["vllm.v1.core.kv_cache_manager"].KVCacheManager
    on_manager = callable(getattr(manager, "remove_skipped_blocks", None))
    skipped = _parameters(manager.remove_skipped_blocks) if on_manager else set()
    identical, two = _two_full_groups(modules)
    return ManagerApi(
        skipped_take_prompt="num_prompt_tokens" in (skipped or set()),
        skipped_on_manager=on_manager,
        copies=callable(getattr(manager, "take_kv_cache_block_copies", None)),
        evicts=callable(getattr(manager, "evict_blocks", None)),
        identical_groups=identical,
        two_full_groups=two,
    )


def _two_full_groups(modules: Mapping[str, ModuleType]) -> tuple[bool, bool]:
    """Whether the release builds a manager over two full-attention groups of one spec,
    and over two at all (with distinct head sizes); tried on a four-block pool."""
    from kvpool.spec import PoolConfig
    from kvpool.spec.manager import FULL_ATTENTION, ManagerConfig

    from ...machines.requests.target import RequestSetup
    from .manager_build import build_manager

    setup = RequestSetup(ManagerConfig(1, (FULL_ATTENTION,) * 2), PoolConfig(4))
    built = []
    for distinct in (False, True):
        try:
            build_manager(modules, setup, distinct_heads=distinct)
        except AssertionError:
            built.append(False)
        else:
            built.append(True)
    return built[0], built[0] or built[1]


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
    coordinator = modules["vllm.v1.core.kv_cache_coordinator"]
    if not callable(getattr(manager, "remove_skipped_blocks", None)) and not callable(
        getattr(getattr(coordinator, "KVCacheCoordinator", None), "remove_skipped_blocks", None)
    ):
        problems.append("neither KVCacheManager nor its coordinator has remove_skipped_blocks()")
    return problems


def check_manager(release: str, modules: Mapping[str, ModuleType]) -> None:
    """Raise :class:`ManagerUnsupported` naming what ``release`` (``vLLM 0.33.0``,
    ``Aphrodite 0.24.1``) lacks."""
    problems = manager_problems(modules)
    if problems:
        raise ManagerUnsupported(
            f"{release}'s KV cache manager cannot be driven by the suite's adapter: "
            f"{'; '.join(problems)}"
        )


def suite_sha256(value: object) -> bytes:
    """The suite's SHA-256 of a block's hash input, for releases whose own hash functions
    cannot be loaded (before 0.11): the pickled input, hashed. Any injective hash serves,
    since the release's keys are paired with the spec's."""
    return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def hash_function(modules: Mapping[str, ModuleType]) -> Callable[[object], bytes]:
    """The release's ``sha256`` (from 0.11 on), else :func:`suite_sha256`."""
    hashing = modules.get(HASHING)
    if hashing is None:
        return suite_sha256
    found: Callable[[object], bytes] = hashing.get_hash_fn_by_name(HASH_ALGORITHM)
    return found
