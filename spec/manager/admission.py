"""Scheduling a request: admit (new), resume (after preemption) and append (new tokens).

Admission follows the order every scheduler must keep: look the prefix up, check there is
room for everything at once (free hits count against the room, since touching takes them out
of the free queue), touch every hit of every group, and only then allocate. Allocating
first could evict a hit the request is about to use.

A partial-entry hit is never written in place: the request's table gets a private copy
(the first new block), the engine copies the data while both blocks are held, and the
source is released (copy-on-write, the not-yet-running path).
"""

from __future__ import annotations

from dataclasses import replace

from ..actions import FreeBlocks, GetNewBlocks, GetNumFreeBlocks, Touch
from .config import ManagerConfig
from .extra_keys import NO_EXTRA, ExtraKeys
from .lookup import Hit, find_cached_prefix
from .pool import PoolCall, blocks_of, count_of
from .report import INCREMENTAL, resent_stores
from .state import BlockData, ManagerState, RequestState, Scheduled, block_hashes


def room_for(pool: PoolCall, needed: int) -> bool:
    """Whether the pool has ``needed`` free blocks now."""
    return count_of(pool(GetNumFreeBlocks())) >= needed


def allocate(pool: PoolCall, config: ManagerConfig, per_group: int) -> tuple[tuple[int, ...], ...]:
    """``per_group`` new blocks for every group, group by group."""
    if per_group == 0:
        return tuple(() for _ in config.groups)
    return tuple(blocks_of(pool(GetNewBlocks(per_group))) for _ in config.groups)


def schedule(
    pool: PoolCall, state: ManagerState, request: RequestState
) -> tuple[ManagerState, Scheduled | None]:
    """Give ``request`` (not running) tables covering all its tokens, from its cached prefix.

    Returns ``None`` when the pool has too little room, having changed nothing but the
    stores the lookup re-sent (a request in the ``"full"`` report mode, :mod:`.report`).
    """
    config, pool_config = state.config, state.pool_config
    groups = len(config.groups)
    num_tokens = len(request.tokens)
    if pool_config.enable_caching:
        hashes = block_hashes(request, pool_config.hash_block_size, state.partitions)
        computed, hit = find_cached_prefix(
            pool, config, hashes, num_tokens, pool_config.hash_block_size
        )
        resent = resent_stores(
            request.report_mode,
            pool_config.enable_kv_cache_events,
            hashes,
            hit.tables,
            config.block_size,
        )
        state = replace(state, resent=state.resent + resent)
    else:
        computed, hit = 0, Hit(0, tuple(() for _ in config.groups))
    per_group = config.blocks_for(num_tokens) - hit.num_blocks
    hits = tuple(b for table in hit.tables for b in table if b) + hit.partial
    held = state.held_blocks()
    free_hits = {b for b in hits if b not in held}
    if not room_for(pool, per_group * groups + len(free_hits)):
        return state, None
    if hits:
        pool(Touch(hits))
    new = allocate(pool, config, per_group)
    contents = dict(state.contents)
    copies: list[tuple[int, int]] = []
    for src, fresh in zip(hit.partial, new, strict=False):
        contents[fresh[0]] = state.contents.get(src, BlockData(None, ()))
        copies.append((src, fresh[0]))
    if hit.partial:
        pool(FreeBlocks(hit.partial))
    tables = tuple(hit.tables[g] + new[g] for g in range(groups))
    request = replace(
        request,
        running=True,
        tables=tables,
        num_computed_tokens=computed,
        num_cached_blocks=(hit.num_blocks,) * groups,
    )
    requests = {**state.requests, request.request_id: request}
    scheduled = Scheduled(computed, tables, tuple(copies))
    return replace(state, requests=requests, contents=contents), scheduled


def admit(
    pool: PoolCall,
    state: ManagerState,
    request_id: str,
    tokens: tuple[int, ...],
    salt: str | None,
    extra: ExtraKeys = NO_EXTRA,
    report_mode: str = INCREMENTAL,
) -> tuple[ManagerState, Scheduled | None]:
    """A new request, scheduled from its cached prefix (see :func:`schedule`)."""
    groups = len(state.config.groups)
    request = RequestState(
        request_id, tokens, salt, False, ((),) * groups, 0, (0,) * groups, extra, report_mode
    )
    return schedule(pool, state, request)


def append(
    pool: PoolCall, state: ManagerState, request_id: str, tokens: tuple[int, ...]
) -> tuple[ManagerState, Scheduled | None]:
    """Grow a running request by ``tokens`` and allocate the blocks they need, in every
    group, at the end of its tables. ``None`` (nothing changed) if the pool lacks room."""
    request = state.requests[request_id]
    config = state.config
    grown = request.tokens + tokens
    per_group = config.blocks_for(len(grown)) - len(request.tables[0])
    if per_group and not room_for(pool, per_group * len(config.groups)):
        return state, None
    new = allocate(pool, config, per_group)
    tables = tuple(t + n for t, n in zip(request.tables, new, strict=True))
    request = replace(request, tokens=grown, tables=tables)
    requests = {**state.requests, request_id: request}
    return replace(state, requests=requests), Scheduled(request.num_computed_tokens, tables)
