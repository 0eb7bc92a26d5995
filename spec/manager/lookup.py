"""Finding a request's cached prefix: the longest hit every group agrees on.

A hit is counted in whole blocks of the manager's ``block_size``; for each block position
the groups that need it are asked together (``get_cached_block`` is all or nothing), so a
position only counts when every one of them hits. A full-attention group needs every block
of the prefix; a sliding-window group only the last ``window_hit_blocks`` of them (the
window's tokens before the next one, in whole blocks), its older positions being the null
block. At least one token is always left to compute, so a
prompt never hits in full. Without sliding-window groups, the block after the full hits
may also be a partial entry (``cache_partial_block``), covering a multiple of the pool's
``hash_block_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..actions import GetCachedBlock
from ..keys import hash_at_block_size
from ..state import NULL_BLOCK
from .config import ManagerConfig
from .pool import PoolCall, blocks_of
from .state import Tables


@dataclass(frozen=True)
class Hit:
    """A cached prefix: ``tables`` holds the hit blocks per group (null where a sliding
    window does not need the block); ``partial`` the partial entry per group after them."""

    num_blocks: int
    tables: Tables
    partial: tuple[int, ...] = ()
    partial_tokens: int = 0


def needs(config: ManagerConfig, group: int, index: int, num_blocks: int) -> bool:
    """Whether ``group`` reads block ``index`` of a prefix of ``num_blocks`` blocks."""
    window = config.window_hit_blocks(group)
    return window == 0 or index >= num_blocks - window


def _lookup(pool: PoolCall, block_hash: bytes, groups: tuple[int, ...]) -> tuple[int, ...]:
    return blocks_of(pool(GetCachedBlock(block_hash, groups)))


def find_cached_prefix(
    pool: PoolCall,
    config: ManagerConfig,
    hashes: tuple[bytes, ...],
    num_tokens: int,
    hash_block_size: int,
) -> tuple[int, Hit]:
    """The longest cached prefix of a request of ``num_tokens`` tokens with ``hashes``.

    Returns the number of tokens it covers and the hit. Only lookups are made.
    """
    bs = config.block_size
    groups = tuple(range(len(config.groups)))
    full = tuple(g for g in groups if not config.groups[g].is_sliding)
    sliding = tuple(g for g in groups if config.groups[g].is_sliding)
    limit = (num_tokens - 1) // bs

    def block_hash(index: int) -> bytes:
        return hash_at_block_size(hashes, hash_block_size, bs, index)

    # Full attention: every block from the first, as far as all full groups hit.
    found: dict[tuple[int, int], int] = {}
    length = limit
    if full:
        length = 0
        while length < limit:
            hit = _lookup(pool, block_hash(length), full)
            if not hit:
                break
            found.update(((g, length), b) for g, b in zip(full, hit, strict=True))
            length += 1
    # Sliding windows: the longest length whose window blocks all hit, from the right.
    while sliding and length > 0:
        window: dict[tuple[int, int], int] = {}
        complete = True
        for index in range(length - 1, -1, -1):
            wanted = tuple(g for g in sliding if needs(config, g, index, length))
            if not wanted:
                break  # windows only reach back so far
            hit = _lookup(pool, block_hash(index), wanted)
            if not hit:
                complete = False
                break
            window.update(((g, index), b) for g, b in zip(wanted, hit, strict=True))
        if complete:
            found.update(window)
            break
        length -= 1
    tables = tuple(
        tuple(found[(g, i)] if needs(config, g, i, length) else NULL_BLOCK for i in range(length))
        for g in groups
    )
    partial: tuple[int, ...] = ()
    partial_tokens = 0
    if not sliding:
        per_block = bs // hash_block_size
        for fine in range(per_block - 1, 0, -1):
            covered = length * bs + fine * hash_block_size
            if covered > num_tokens - 1:
                continue
            hit = _lookup(pool, hashes[covered // hash_block_size - 1], groups)
            if hit:
                partial, partial_tokens = hit, fine * hash_block_size
                break
    computed = length * bs + partial_tokens
    return computed, Hit(length, tables, partial, partial_tokens)
