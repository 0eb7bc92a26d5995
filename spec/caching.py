"""The prefix cache: cache_full_blocks, cache_partial_block, get_cached_block,
evict_blocks, move_block_hashes and reset_prefix_cache.
"""

from __future__ import annotations

from dataclasses import replace

from .actions import (
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    GetCachedBlock,
    MoveBlockHashes,
    ResetPrefixCache,
)
from .allocation import out_of_range, refuse
from .errors import ContractViolation
from .events import AllBlocksCleared, BlockRemoved, BlockStored
from .flat import cache_positions
from .invariants import invariants_hold  # noqa: F401  (read by the docstring contracts)
from .keys import blocks_viewable, group_of, hash_at_block_size, hash_of, make_key
from .observation import Observation
from .state import NULL_BLOCK, PoolState, emit, fire_watchers, insert_key, remove_keys


def strip_keys(state: PoolState, block: int) -> PoolState:
    """Remove every key of ``block``, publishing one ``BlockRemoved`` per key."""
    state, removed = remove_keys(state, block)
    return emit(state, *(BlockRemoved(hash_of(k), group_of(k)) for k in removed))


def group_violation(groups: tuple[int, ...], op: str) -> ContractViolation | None:
    """A group id must fit the key's 4-byte suffix."""
    for group in groups:
        if not 0 <= group < 2**32:
            return ContractViolation("group-id-range", op, None, f"group id {group}")
    return None


def caching_violation(
    state: PoolState, block_size: int, group: int, op: str
) -> ContractViolation | None:
    """What every caching call needs: caching on, a group id that fits a key, a block size
    the hashes can be viewed at."""
    if not state.config.enable_caching:
        return ContractViolation("caching-enabled", op)
    problem = group_violation((group,), op)
    if problem is not None:
        return problem
    hbs = state.config.hash_block_size
    if block_size <= 0 or block_size % hbs:
        return ContractViolation(
            "block-size-multiple", op, None, f"block_size {block_size} with hash_block_size {hbs}"
        )
    if not state.profile.has_hash_block_size and block_size != hbs:
        return ContractViolation(
            "block-size-multiple",
            op,
            None,
            f"profile {state.profile.name!r} hashes requests at block_size: block_size "
            f"{block_size} must equal hash_block_size {hbs}",
        )
    return None


# --- cache_full_blocks ------------------------------------------------------------------


def coarse_block_hash(
    state: PoolState, block_hashes: tuple[bytes, ...], block_size: int, index: int
) -> bytes:
    """The hash naming block ``index`` of a request viewed in blocks of ``block_size``: the
    last fine hash inside it, or (profiles with ``coarse_hash_concatenates``) all of the
    fine hashes inside it, concatenated."""
    hbs = state.config.hash_block_size
    if state.profile.coarse_hash_concatenates and block_size != hbs:
        scale = block_size // hbs
        return b"".join(block_hashes[index * scale : (index + 1) * scale])
    return hash_at_block_size(block_hashes, hbs, block_size, index)


def blocks_to_cache(action: CacheFullBlocks) -> list[tuple[int, int]]:
    """``(index, block)`` of the blocks this call caches: the new full ones, less null and
    masked-out blocks; ``index`` counts from the request's first block."""
    return list(
        cache_positions(
            action.blocks, action.num_cached_blocks, action.num_full_blocks, action.block_mask
        )
    )


def cache_full_blocks_violation(
    state: PoolState, action: CacheFullBlocks
) -> ContractViolation | None:
    op = action.operation
    problem = caching_violation(state, action.block_size, action.group_id, op) or out_of_range(
        state, action.blocks, op
    )
    if problem is not None:
        return problem
    nc, nf = action.num_cached_blocks, action.num_full_blocks
    if not 0 <= nc <= nf <= len(action.blocks):
        return ContractViolation(
            "cache-range",
            op,
            None,
            f"num_cached_blocks={nc}, num_full_blocks={nf}, {len(action.blocks)} blocks",
        )
    if action.block_mask is not None and not state.profile.has_block_mask:
        return ContractViolation(
            "unsupported-action",
            op,
            None,
            f"profile {state.profile.name!r}'s cache_full_blocks has no block_mask",
        )
    if action.block_mask is not None and len(action.block_mask) != nf - nc:
        return ContractViolation(
            "cache-range",
            op,
            None,
            f"block_mask has {len(action.block_mask)} entries for {nf - nc} new full blocks",
        )
    hbs = state.config.hash_block_size
    if nc < nf and blocks_viewable(len(action.block_hashes), hbs, action.block_size) < nf:
        return ContractViolation(
            "hashes-available",
            op,
            None,
            f"{len(action.block_hashes)} hashes of {hbs} tokens do not "
            f"cover {nf} blocks of {action.block_size}",
        )
    profile = state.profile
    seen: set[int] = set()
    for index, b in blocks_to_cache(action):
        if not state.is_held(b):
            return ContractViolation("cache-held", op, b)
        if b in seen:
            return ContractViolation("cache-distinct", op, b)
        seen.add(b)
        primary = state.primary[b]
        if primary is not None and primary.num_tokens >= (index + 1) * action.block_size:
            return ContractViolation(
                "cache-fresh",
                op,
                b,
                f"block {b} already has a key covering {primary.num_tokens} tokens",
            )
        if primary is not None and not profile.cache_promotes_partial:
            return ContractViolation(
                "cache-fresh",
                op,
                b,
                f"block {b} already has a key and profile {profile.name!r} cannot re-key it",
            )
    if profile.parent_hash_from_block and state.config.enable_kv_cache_events and 0 < nc < nf:
        parent = action.blocks[nc - 1]
        if state.primary[parent] is None:
            return ContractViolation(
                "cache-parent-keyed",
                op,
                parent,
                f"profile {profile.name!r} reads the parent hash off block {parent}, "
                "which has no key",
            )
    return None


def cache_full_blocks(state: PoolState, action: CacheFullBlocks) -> tuple[PoolState, Observation]:
    """Register ``blocks[num_cached_blocks:num_full_blocks]`` under the request's prefix hashes.

    A block's key is the request's hash at the end of that block, viewed at ``block_size``,
    plus the group id. A partial entry promoted to a full block loses its old keys first.
    With events on, one ``BlockStored`` describes the whole call.

    pre: invariants_hold(state)
    pre: cache_full_blocks_violation(state, action) is None
    post: all(__return__[0].primary[b] is not None for _, b in blocks_to_cache(action))
    post: __return__[0].free_queue == state.free_queue
    post: __return__[0].ref_cnt == state.ref_cnt
    post: invariants_hold(__return__[0])
    """
    refuse(cache_full_blocks_violation(state, action))
    if action.num_cached_blocks >= action.num_full_blocks:
        return state, Observation()
    stored: list[bytes] = []
    for index, b in blocks_to_cache(action):
        block_hash = coarse_block_hash(state, action.block_hashes, action.block_size, index)
        if state.primary[b] is not None:
            state = strip_keys(state, b)
        state = insert_key(
            state, b, make_key(block_hash, action.group_id), (index + 1) * action.block_size
        )
        stored.append(block_hash)
    nc = action.num_cached_blocks
    parent = (
        coarse_block_hash(state, action.block_hashes, action.block_size, nc - 1) if nc > 0 else None
    )
    parent_key = state.primary[action.blocks[nc - 1]] if nc > 0 else None
    if state.profile.parent_hash_from_block and parent_key is not None:
        parent = hash_of(parent_key.key)
    state = emit(
        state,
        BlockStored(
            block_hashes=tuple(stored),
            parent_block_hash=parent,
            group_id=action.group_id,
            block_size=action.block_size,
            num_tokens=(action.num_full_blocks - nc) * action.block_size,
        ),
    )
    return state, Observation()


# --- cache_partial_block ----------------------------------------------------------------


def cache_partial_block_violation(
    state: PoolState, action: CachePartialBlock
) -> ContractViolation | None:
    op = action.operation
    profile = state.profile
    if action.replace_existing_hashes and not profile.has_replace_existing_hashes:
        return ContractViolation(
            "unsupported-action",
            op,
            None,
            f"profile {profile.name!r}'s cache_partial_block has no replace_existing_hashes",
        )
    problem = out_of_range(state, (action.block,), op)
    if problem is not None or action.block == NULL_BLOCK:
        return problem
    problem = caching_violation(state, action.block_size, action.group_id, op)
    if problem is not None:
        return problem
    if not state.is_held(action.block):
        return ContractViolation("cache-held", op, action.block)
    hbs = state.config.hash_block_size
    if action.num_tokens <= 0 or action.num_tokens % hbs:
        return ContractViolation(
            "partial-tokens",
            op,
            action.block,
            f"num_tokens={action.num_tokens} with hash_block_size {hbs}",
        )
    inside = action.block_size > hbs and action.num_tokens % action.block_size != 0
    if not profile.partial_at_boundary and not action.replace_existing_hashes and not inside:
        return ContractViolation(
            "partial-tokens",
            op,
            action.block,
            f"profile {profile.name!r} registers partial entries only strictly inside a block: "
            f"num_tokens={action.num_tokens}, block_size={action.block_size}, "
            f"hash_block_size={hbs}",
        )
    if action.num_tokens // hbs > len(action.block_hashes):
        return ContractViolation(
            "hashes-available",
            op,
            action.block,
            f"{len(action.block_hashes)} hashes of {hbs} tokens do not "
            f"cover {action.num_tokens} tokens",
        )
    return None


def cache_partial_block(
    state: PoolState, action: CachePartialBlock
) -> tuple[PoolState, Observation]:
    """Make ``block`` reachable from the prefix boundary at ``num_tokens``; return the key.

    The key becomes the block's primary if it has none, else an extra key. A block whose
    primary covers fewer tokens loses its old keys first (they describe a shorter prefix);
    ``replace_existing_hashes`` drops them whatever they cover. The null block gets nothing.

    pre: invariants_hold(state)
    pre: cache_partial_block_violation(state, action) is None
    post: action.block == 0 or __return__[1].result in __return__[0].keys_of(action.block)
    post: __return__[0].free_queue == state.free_queue
    post: invariants_hold(__return__[0])
    """
    refuse(cache_partial_block_violation(state, action))
    if action.block == NULL_BLOCK:
        return state, Observation(None)
    b = action.block
    hbs = state.config.hash_block_size
    num_hashes = action.num_tokens // hbs
    block_hash = action.block_hashes[num_hashes - 1]
    key = make_key(block_hash, action.group_id)
    already = key in state.keys_of(b)
    primary = state.primary[b]
    if action.replace_existing_hashes:
        state = strip_keys(state, b)
        already = False
    elif not already and primary is not None and primary.num_tokens < action.num_tokens:
        state = strip_keys(state, b)
    state = insert_key(state, b, key, action.num_tokens)
    if not already:
        start = partial_event_start(state, action)
        state = emit(
            state,
            BlockStored(
                block_hashes=(block_hash,),
                parent_block_hash=action.block_hashes[start // hbs - 1] if start > 0 else None,
                group_id=action.group_id,
                block_size=action.num_tokens - start,
                num_tokens=action.num_tokens - start,
            ),
        )
    return state, Observation(key)


def partial_event_start(state: PoolState, action: CachePartialBlock) -> int:
    """Where the tokens a partial entry's ``BlockStored`` describes begin: at the start of
    the entry's block, so that its parent is the block before (a hash a subscriber was
    told of), or, for profiles with ``partial_parent_fine_hash``, one hash block before
    ``num_tokens`` (its parent the fine hash there, stored or not: upstream issue 58119)."""
    if state.profile.partial_parent_fine_hash:
        return action.num_tokens - state.config.hash_block_size
    return (action.num_tokens - 1) // action.block_size * action.block_size


# --- get_cached_block -------------------------------------------------------------------


def get_cached_block_violation(
    state: PoolState, action: GetCachedBlock
) -> ContractViolation | None:
    return group_violation(action.group_ids, action.operation)


def get_cached_block(state: PoolState, action: GetCachedBlock) -> tuple[PoolState, Observation]:
    """The earliest-cached block under the hash in each group, or ``None`` if any group misses.

    pre: invariants_hold(state)
    pre: get_cached_block_violation(state, action) is None
    post: __return__[0] == state
    post: __return__[1].result is None or len(__return__[1].result) == len(action.group_ids)
    """
    refuse(get_cached_block_violation(state, action))
    hits: list[int] = []
    for group in action.group_ids:
        blocks = state.cache.get(make_key(action.block_hash, group), ())
        if not blocks:
            return state, Observation(None)
        hits.append(blocks[0])
    return state, Observation(tuple(hits))


# --- evict_blocks -----------------------------------------------------------------------


def evict_blocks_violation(state: PoolState, action: EvictBlocks) -> ContractViolation | None:
    return out_of_range(state, action.block_ids, action.operation)


def evict_blocks(state: PoolState, action: EvictBlocks) -> tuple[PoolState, Observation]:
    """Strip every key of the listed blocks; free nothing, move nothing in the queue.

    pre: invariants_hold(state)
    pre: evict_blocks_violation(state, action) is None
    post: all(not __return__[0].keys_of(b) for b in action.block_ids)
    post: __return__[0].free_queue == state.free_queue
    post: __return__[0].ref_cnt == state.ref_cnt
    post: invariants_hold(__return__[0])
    """
    refuse(evict_blocks_violation(state, action))
    for b in dict.fromkeys(action.block_ids):
        state = strip_keys(state, b)
    return state, Observation()


# --- move_block_hashes ------------------------------------------------------------------


def move_block_hashes_violation(
    state: PoolState, action: MoveBlockHashes
) -> ContractViolation | None:
    op = action.operation
    problem = out_of_range(state, (action.src, action.dst), op)
    if problem is not None:
        return problem
    if action.dst == NULL_BLOCK:
        return ContractViolation("move-null", op, action.dst)
    if state.keys_of(action.dst):
        return ContractViolation("move-dst-unkeyed", op, action.dst)
    return None


def move_block_hashes(state: PoolState, action: MoveBlockHashes) -> tuple[PoolState, Observation]:
    """Re-point every key of ``src`` to ``dst``: src's primary becomes dst's primary (with
    its token count), the rest become extra keys. No entry is ever missing; each moved entry
    becomes the newest duplicate under its key. No events.

    pre: invariants_hold(state)
    pre: move_block_hashes_violation(state, action) is None
    post: set(__return__[0].keys_of(action.dst)) == set(state.keys_of(action.src))
    post: set(__return__[0].cache) == set(state.cache)
    post: invariants_hold(__return__[0])
    """
    refuse(move_block_hashes_violation(state, action))
    primary = state.primary[action.src]
    state, moved = remove_keys(state, action.src)
    for key in moved:
        assert primary is not None
        state = insert_key(state, action.dst, key, primary.num_tokens)
    return state, Observation()


# --- reset_prefix_cache -----------------------------------------------------------------


def reset_prefix_cache(state: PoolState, action: ResetPrefixCache) -> tuple[PoolState, Observation]:
    """Forget every key, if no real block is held; otherwise change nothing.

    On success every reuse watcher fires (reported in block order) and, with events on,
    ``AllBlocksCleared`` is published. The free queue keeps its order.

    pre: invariants_hold(state)
    post: __return__[1].result == (len(state.free_queue) == state.num_blocks - 1)
    post: not __return__[1].result or not __return__[0].cache
    post: __return__[1].result or __return__[0] == state
    post: invariants_hold(__return__[0])
    """
    if len(state.free_queue) != state.num_blocks - 1:
        return state, Observation(False)
    state, fired = fire_watchers(state, sorted(state.watchers))
    n = state.num_blocks
    state = replace(state, cache={}, primary=(None,) * n, extra=(frozenset(),) * n)
    state = emit(state, AllBlocksCleared())
    return state, Observation(True, fired)
