"""The caller's side of the events contract: caching calls as a KV cache manager makes them.

A ``BlockStored`` names the hash before its first block as its parent. The pool takes that
hash from the request (or, in old releases, from the block before); whether a subscriber
knows it depends on the caller too: a manager caches a request's blocks in order, so the
block before the new ones is cached under the request's hash when it calls. A pool-level
run that drew ``num_cached_blocks`` over blocks never cached would make every pool name an
unknown parent, by the caller's doing. At the ``events`` level the pool machine therefore
draws only caching calls a manager could make (:func:`manager_could_call`); everything a
pool then publishes is the pool's own doing.
"""

from __future__ import annotations

from kvpool.spec import (
    NULL_BLOCK,
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    FreeBlocks,
    PoolState,
)
from kvpool.spec.caching import coarse_block_hash
from kvpool.spec.keys import make_key


def manager_could_call(state: PoolState, action: Action) -> bool:
    """Whether a manager could make this call now: a request's blocks are distinct (it
    caches them, and frees them, one request per call), and the block before the new ones
    is cached under the request's hash (for a partial entry, by a block other than the
    entry's). Any other action: yes."""
    if isinstance(action, FreeBlocks):
        real = [b for b in action.blocks if b != NULL_BLOCK]
        return len(real) == len(set(real))
    if isinstance(action, CacheFullBlocks):
        real = [b for b in action.blocks if b != NULL_BLOCK]
        if len(real) != len(set(real)):
            return False
        nc = action.num_cached_blocks
        if nc == 0 or nc >= action.num_full_blocks:
            return True
        parent = action.blocks[nc - 1]
        block_hash = coarse_block_hash(state, action.block_hashes, action.block_size, nc - 1)
        return parent in state.cache.get(make_key(block_hash, action.group_id), ())
    if isinstance(action, CachePartialBlock):
        if action.num_tokens <= 0 or action.block_size <= 0:
            return True  # refused anyway; the contract check decides
        index = (action.num_tokens - 1) // action.block_size
        if index == 0:
            return True
        hbs = state.config.hash_block_size
        if index * action.block_size // hbs > len(action.block_hashes):
            return True
        block_hash = coarse_block_hash(state, action.block_hashes, action.block_size, index - 1)
        holders = state.cache.get(make_key(block_hash, action.group_id), ())
        return any(b != action.block for b in holders)
    return True
