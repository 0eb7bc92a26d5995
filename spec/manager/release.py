"""Giving blocks back: finish, preempt, and resetting the prefix cache.

A request's blocks are freed group by group, each table **tail first**: keyed blocks go to
the back of the free queue in the order given, so the tail (the longest prefix, the least
likely to be hit again) is evicted first and the head, which every hit needs, last.

Where the profile says ``window_unkeyed_free_first`` (vLLM 0.23), a sliding-window group
frees in two calls: its keyed blocks as above, then its blocks without a key with
``evict_first``, so that scratch blocks are reused before any prefix-cache entry. A table's
keyed entries are its ``num_cached_blocks`` leading ones (a request's blocks keep their keys
while it holds them; such a profile has no partial entries).
"""

from __future__ import annotations

from dataclasses import replace

from ..actions import EvictBlocks, FreeBlocks, ResetPrefixCache
from ..state import NULL_BLOCK
from .pool import PoolCall
from .state import ManagerState, RequestState


def free_entries(
    pool: PoolCall, state: ManagerState, *, group: int, table: tuple[int, ...], cut: int, keyed: int
) -> None:
    """Free the blocks of ``table``'s first ``cut`` entries (a table of ``group``), tail
    first, the null block left out: in one call; or, for a sliding window under
    ``window_unkeyed_free_first``, the keyed ones (the first ``keyed`` entries) and then
    the others with ``evict_first``."""
    blocks = tuple(b for b in reversed(table[:cut]) if b != NULL_BLOCK)
    if not (state.window_unkeyed_free_first and state.config.groups[group].is_sliding):
        if blocks:
            pool(FreeBlocks(blocks))
        return
    cached = set(table[:keyed])
    first = tuple(b for b in blocks if b in cached)
    scratch = tuple(b for b in blocks if b not in cached)
    if first:
        pool(FreeBlocks(first))
    if scratch:
        pool(FreeBlocks(scratch, evict_first=True))


def keyed_entries(state: ManagerState, request: RequestState, group: int) -> int:
    """How many leading entries of the request's table of ``group`` have keys."""
    return request.num_cached_blocks[group] if state.pool_config.enable_caching else 0


def free_tables(pool: PoolCall, state: ManagerState, request: RequestState) -> None:
    """Free every block of ``request``'s tables, group by group, each tail first."""
    for g, table in enumerate(request.tables):
        keyed = keyed_entries(state, request, g)
        free_entries(pool, state, group=g, table=table, cut=len(table), keyed=keyed)


def finish(pool: PoolCall, state: ManagerState, request_id: str) -> ManagerState:
    """Free the request's blocks (if it is running) and forget it."""
    free_tables(pool, state, state.requests[request_id])
    requests = {k: v for k, v in state.requests.items() if k != request_id}
    return replace(state, requests=requests)


def preempt(pool: PoolCall, state: ManagerState, request_id: str) -> ManagerState:
    """Free a running request's blocks; it keeps its tokens and waits to be resumed."""
    request = state.requests[request_id]
    free_tables(pool, state, request)
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
