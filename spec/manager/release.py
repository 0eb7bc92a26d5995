"""Giving blocks back: finish, preempt, and resetting the prefix cache.

A request's blocks are freed group by group, each table **tail first**: keyed blocks go to
the back of the free queue in the order given, so the tail (the longest prefix, the least
likely to be hit again) is evicted first and the head, which every hit needs, last.
"""

from __future__ import annotations

from dataclasses import replace

from ..actions import EvictBlocks, FreeBlocks, ResetPrefixCache
from ..state import NULL_BLOCK
from .pool import PoolCall
from .state import ManagerState, RequestState


def free_tables(pool: PoolCall, request: RequestState) -> None:
    """Free every block of ``request``'s tables, group by group, each tail first."""
    for table in request.tables:
        blocks = tuple(b for b in reversed(table) if b != NULL_BLOCK)
        if blocks:
            pool(FreeBlocks(blocks))


def finish(pool: PoolCall, state: ManagerState, request_id: str) -> ManagerState:
    """Free the request's blocks (if it is running) and forget it."""
    free_tables(pool, state.requests[request_id])
    requests = {k: v for k, v in state.requests.items() if k != request_id}
    return replace(state, requests=requests)


def preempt(pool: PoolCall, state: ManagerState, request_id: str) -> ManagerState:
    """Free a running request's blocks; it keeps its tokens and waits to be resumed."""
    request = state.requests[request_id]
    free_tables(pool, request)
    groups = len(request.tables)
    waiting = replace(
        request,
        running=False,
        tables=((),) * groups,
        num_computed_tokens=0,
        num_cached_blocks=(0,) * groups,
    )
    return replace(state, requests={**state.requests, request_id: waiting})


def reset_cache(pool: PoolCall, state: ManagerState) -> bool:
    """``reset_prefix_cache()``: succeeds exactly when no request holds a block."""
    result = pool(ResetPrefixCache()).result
    assert isinstance(result, bool)
    return result


def evict_cached(pool: PoolCall, block_ids: tuple[int, ...]) -> None:
    """``evict_blocks``: the blocks lose their keys; none is held, so no table changes."""
    pool(EvictBlocks(block_ids))
