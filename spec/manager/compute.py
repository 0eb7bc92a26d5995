"""One forward pass over a running request's pending tokens.

1. Copy-on-write, the running path: the block where the next token goes may be registered
   (the request cached it as a partial entry). It is not writable, and the table must keep
   it, so its keys move to a fresh block that receives a copy of its data
   (``move_block_hashes``, after the copy is made); that copy is released to the cache, and
   the table's block is writable again.
2. Writes: every block receiving a pending token is checked with ``is_block_writable``
   first; KV only ever lands in a block held once, by this request, with no key.
3. Registration: the blocks that became full are cached (``cache_full_blocks``) and, on
   request, the tail as a partial entry (``cache_partial_block``).
4. Sliding windows: blocks that left a sliding-window group's window become the null
   block in its table and are freed, tail first.
"""

from __future__ import annotations

from dataclasses import replace

from ..actions import (
    CacheFullBlocks,
    CachePartialBlock,
    FreeBlocks,
    GetNewBlocks,
    IsBlockWritable,
    MoveBlockHashes,
)
from .admission import room_for
from .flat import slide_table, written_entries
from .pool import PoolCall, blocks_of
from .release import free_entries
from .state import BlockData, ManagerState, RequestState, Scheduled, block_hashes


class SpecBug(AssertionError):
    """The request model broke its own guard: a bug in the spec, never in a target."""


def written_blocks(request: RequestState, block_size: int) -> list[tuple[int, int]]:
    """``(group, index)`` of every table entry that receives a pending token."""
    return written_entries(
        request.num_computed_tokens, len(request.tokens), len(request.tables), block_size
    )


def write(
    data: BlockData | None, salt: str | None, offset: int, tokens: tuple[int, ...]
) -> BlockData:
    """``data`` with ``tokens`` written from slot ``offset`` on (unknown slots hold -1)."""
    kept = data.tokens[:offset] if data is not None else ()
    kept += (-1,) * (offset - len(kept))
    return BlockData(salt, kept + tokens)


def compute(
    pool: PoolCall, state: ManagerState, request_id: str, cache_partial: bool
) -> tuple[ManagerState, Scheduled | None]:
    """Run one forward pass for a running request; ``None`` if a copy-on-write finds no
    free block (nothing is changed then)."""
    request = state.requests[request_id]
    config, pool_config = state.config, state.pool_config
    bs = config.block_size
    contents = dict(state.contents)
    targets = written_blocks(request, bs)
    # 1. copy-on-write for a registered tail that is about to be written
    first = request.num_computed_tokens // bs
    shared = [
        request.tables[g][i]
        for g, i in targets
        if i == first and request.num_computed_tokens % bs
        if not pool(IsBlockWritable(request.tables[g][i])).result
    ]
    if shared and not room_for(pool, len(shared)):
        return state, None
    copies: list[tuple[int, int]] = []
    for src in shared:
        (dst,) = blocks_of(pool(GetNewBlocks(1)))
        contents[dst] = contents.get(src, BlockData(None, ()))
        copies.append((src, dst))
    # the copies are made; now the cache entries follow the data and the copies are released
    for src, dst in copies:
        pool(MoveBlockHashes(src, dst))
    if copies:
        pool(FreeBlocks(tuple(dst for _, dst in copies)))
    # 2. the writes, each guarded
    for g, i in targets:
        block = request.tables[g][i]
        if not pool(IsBlockWritable(block)).result:
            raise SpecBug(f"compute({request_id!r}) would write block {block}, not writable")
        start = max(request.num_computed_tokens, i * bs)
        end = min(len(request.tokens), (i + 1) * bs)
        contents[block] = write(
            contents.get(block), request.salt, start - i * bs, request.tokens[start:end]
        )
    # 3. registration
    num_full = len(request.tokens) // bs
    tables = request.tables
    if pool_config.enable_caching:
        hashes = block_hashes(request, pool_config.hash_block_size, state.partitions)
        for g, table in enumerate(tables):
            if num_full > request.num_cached_blocks[g]:
                pool(CacheFullBlocks(hashes, table, request.num_cached_blocks[g], num_full, bs, g))
        partial_tokens = len(hashes) * pool_config.hash_block_size
        if cache_partial and partial_tokens > num_full * bs:
            for g, table in enumerate(tables):
                pool(CachePartialBlock(hashes, table[num_full], partial_tokens, g, bs))
    # 4. sliding windows (every full block is keyed by now, when caching is on)
    caching = pool_config.enable_caching
    tables = tuple(
        slide(pool, state, g, table, len(request.tokens), num_full if caching else 0)
        for g, table in enumerate(tables)
    )
    request = replace(
        request,
        tables=tables,
        num_computed_tokens=len(request.tokens),
        num_cached_blocks=(num_full,) * len(tables)
        if pool_config.enable_caching
        else (0,) * len(tables),
    )
    state = replace(state, requests={**state.requests, request_id: request}, contents=contents)
    return state, Scheduled(request.num_computed_tokens, tables, tuple(copies))


def slide(
    pool: PoolCall,
    state: ManagerState,
    group: int,
    table: tuple[int, ...],
    num_computed_tokens: int,
    keyed: int,
) -> tuple[int, ...]:
    """``table`` with the entries no token after the first ``num_computed_tokens`` reads
    nulled and freed (for a sliding-window group; a full-attention group keeps
    everything); its first ``keyed`` entries have keys."""
    cut = min(len(table), state.config.skipped_blocks(group, num_computed_tokens))
    slid, dropped = slide_table(table, cut)
    if dropped:
        free_entries(pool, state, group=group, table=table, cut=cut, keyed=keyed)
    return slid
