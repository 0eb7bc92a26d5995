"""``step(state, action)``: the spec as one function.

Every action goes through here: the profile must offer it, the caller's contract must hold
(else :class:`ContractViolation`, state unchanged), then the action's transition runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from . import allocation, caching, queries
from .actions import (
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    MoveBlockHashes,
    PeerGetNewBlocks,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)
from .errors import ContractViolation
from .observation import Observation
from .state import PoolState

Transition = Callable[[PoolState, Any], tuple[PoolState, Observation]]
Check = Callable[[PoolState, Any], ContractViolation | None]


def _no_check(state: PoolState, action: Any) -> ContractViolation | None:
    return None


#: action type -> (contract check, transition)
TRANSITIONS: dict[type[Action], tuple[Check, Transition]] = {
    GetNewBlocks: (allocation.get_new_blocks_violation, allocation.get_new_blocks),
    PeerGetNewBlocks: (allocation.peer_get_new_blocks_violation, allocation.peer_get_new_blocks),
    FreeBlocks: (allocation.free_blocks_violation, allocation.free_blocks),
    Touch: (allocation.touch_violation, allocation.touch),
    UnpinBlocks: (allocation.unpin_blocks_violation, allocation.unpin_blocks),
    CacheFullBlocks: (caching.cache_full_blocks_violation, caching.cache_full_blocks),
    CachePartialBlock: (caching.cache_partial_block_violation, caching.cache_partial_block),
    GetCachedBlock: (caching.get_cached_block_violation, caching.get_cached_block),
    EvictBlocks: (caching.evict_blocks_violation, caching.evict_blocks),
    MoveBlockHashes: (caching.move_block_hashes_violation, caching.move_block_hashes),
    ResetPrefixCache: (_no_check, caching.reset_prefix_cache),
    IsBlockWritable: (queries.is_block_writable_violation, queries.is_block_writable),
    GetUsage: (_no_check, queries.get_usage),
    GetNumFreeBlocks: (_no_check, queries.get_num_free_blocks),
    TakeEvents: (_no_check, queries.take_events),
}


def violation(state: PoolState, action: Action) -> ContractViolation | None:
    """Why ``action`` is outside the contract in ``state``, or ``None`` if it is allowed."""
    if state is _Allowed.state and action is _Allowed.action:
        return None
    if not state.profile.offers(action.operation):
        return ContractViolation(
            "unsupported-action",
            action.operation,
            None,
            f"profile {state.profile.name!r} has no {action.operation}",
        )
    check, _ = TRANSITIONS[type(action)]
    found = check(state, action)
    if found is None:
        _Allowed.state, _Allowed.action = state, action
    return found


class _Allowed:
    """The latest action found allowed, and the state it was allowed in. A caller often
    asks about the same pair again (whoever drew the action, then :func:`step`); both are
    immutable values, and kept alive here, so asking again cannot find another answer.
    (A violation is not kept: each call gets an exception of its own to raise.)"""

    state: PoolState | None = None
    action: Action | None = None


def step(state: PoolState, action: Action) -> tuple[PoolState, Observation]:
    """Apply ``action``: the next state and what the caller observes.

    Raises :class:`ContractViolation` (state unchanged) for an action outside the contract.
    """
    problem = violation(state, action)
    if problem is not None:
        raise problem
    _, transition = TRANSITIONS[type(action)]
    return transition(state, action)


def adopt_allocation(state: PoolState, blocks: tuple[int, ...], peer: bool = False) -> PoolState:
    """Move ``blocks`` to the front of the free queue, in that order.

    The ``safety`` level accepts any eviction order: before a ``get_new_blocks`` the spec
    adopts the blocks the pool under test chose, so only set semantics are judged. Blocks
    that are not free are left where they are; the following step then disagrees.
    """
    if peer:
        assert state.peer is not None
        return replace(state, peer=adopt_allocation(state.peer, blocks))
    free = state.free
    chosen = [b for b in dict.fromkeys(blocks) if b in free]
    rest = tuple(b for b in state.free_queue if b not in chosen)
    return replace(state, free_queue=(*chosen, *rest))


def run(state: PoolState, *actions: Action) -> PoolState:
    """Apply ``actions`` in order and return the final state (observations are dropped)."""
    for action in actions:
        state, _ = step(state, action)
    return state
