"""Handing blocks out and taking them back: get_new_blocks, free_blocks, touch, unpin_blocks.

Each operation has a ``*_violation`` function, the caller's contract (``None`` when the
action is allowed), and the transition itself, whose docstring states the pre- and
postconditions in PEP 316 form for CrossHair.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from .actions import FreeBlocks, GetNewBlocks, PeerGetNewBlocks, Touch, UnpinBlocks
from .errors import ContractViolation
from .events import BlockRemoved
from .flat import (
    free_into_queue,
    take_from_front,
    touch_counts,
    unpin_into_queue,
)
from .invariants import invariants_hold  # noqa: F401  (read by the docstring contracts)
from .keys import group_of, hash_of
from .observation import Observation
from .state import NULL_BLOCK, PoolState, emit, fire_watchers, remove_keys


def refuse(violation: ContractViolation | None) -> None:
    """Raise ``violation`` if there is one."""
    if violation is not None:
        raise violation


def out_of_range(state: PoolState, blocks: tuple[int, ...], op: str) -> ContractViolation | None:
    """The first block id that does not name a block of ``state``."""
    for b in blocks:
        if not state.in_range(b):
            return ContractViolation(
                "block-id-range", op, b, f"block {b} is not in 0..{state.num_blocks - 1}"
            )
    return None


def over_release(
    state: PoolState, blocks: tuple[int, ...], rule: str, op: str
) -> ContractViolation | None:
    """The first block released more times than it is held (the null block is skipped)."""
    for b, times in Counter(b for b in blocks if b != NULL_BLOCK).items():
        if times > state.ref_cnt[b]:
            return ContractViolation(
                rule, op, b, f"block {b} is released {times} time(s) but held {state.ref_cnt[b]}"
            )
    return None


# --- get_new_blocks ---------------------------------------------------------------------


def get_new_blocks_violation(state: PoolState, action: GetNewBlocks) -> ContractViolation | None:
    n = action.num_blocks
    if not 0 <= n <= len(state.free_queue):
        return ContractViolation(
            "get-new-blocks-count",
            action.operation,
            None,
            f"asked for {n} blocks with {len(state.free_queue)} free",
        )
    return None


def get_new_blocks(state: PoolState, action: GetNewBlocks) -> tuple[PoolState, Observation]:
    """Hand out ``num_blocks`` blocks from the front of the free queue, in queue order.

    Each block's reuse watcher fires and is dropped; with caching on, each loses every key
    (one ``BlockRemoved`` per key); each ends held once. Where the pool flushes under
    pressure, an allocation that would evict a cached block drops every free block's keys
    first (:func:`flush_under_pressure`).

    pre: invariants_hold(state)
    pre: get_new_blocks_violation(state, action) is None
    post: __return__[1].result == state.free_queue[:action.num_blocks]
    post: __return__[0].free_queue == state.free_queue[action.num_blocks:]
    post: all(__return__[0].ref_cnt[b] == 1 for b in state.free_queue[:action.num_blocks])
    post: all(not __return__[0].keys_of(b) for b in state.free_queue[:action.num_blocks])
    post: invariants_hold(__return__[0])
    """
    refuse(get_new_blocks_violation(state, action))
    state = flush_under_pressure(state, action.num_blocks)
    taken, ref_cnt, rest = take_from_front(state.free_queue, state.ref_cnt, action.num_blocks)
    state, fired = fire_watchers(state, taken)
    for b in taken:
        if state.config.enable_caching:
            state, removed = remove_keys(state, b)
            state = emit(state, *(BlockRemoved(hash_of(k), group_of(k)) for k in removed))
    state = replace(state, ref_cnt=ref_cnt, free_queue=rest)
    return state, Observation(taken, fired)


def flush_under_pressure(state: PoolState, num_blocks: int) -> PoolState:
    """Where the pool flushes under pressure (``flushes_under_pressure``): an allocation of
    ``num_blocks`` that would hand out a block with a key (evict it) first drops the keys of
    every free block, each removal published, instead of evicting one block at a time. The
    free queue keeps its order; held blocks keep their keys (their requests still read
    them); no reuse watcher fires (that happens only to the blocks handed out).

    pre: 0 <= num_blocks <= len(state.free_queue)
    post: __return__.free_queue == state.free_queue
    post: __return__.ref_cnt == state.ref_cnt
    post: __return__ == state or all(not __return__.keys_of(b) for b in state.free_queue)
    """
    if not (state.profile.flushes_under_pressure and state.config.enable_caching):
        return state
    if all(state.primary[b] is None for b in state.free_queue[:num_blocks]):
        return state  # nothing cached would be evicted: no pressure
    for b in state.free_queue:
        state, removed = remove_keys(state, b)
        state = emit(state, *(BlockRemoved(hash_of(k), group_of(k)) for k in removed))
    return state


def peer_get_new_blocks_violation(
    state: PoolState, action: PeerGetNewBlocks
) -> ContractViolation | None:
    if state.peer is None:
        return ContractViolation("foreign-route", action.operation, None, "there is no peer pool")
    if not 0 <= action.num_blocks <= len(state.peer.free_queue):
        return ContractViolation(
            "get-new-blocks-count",
            action.operation,
            None,
            f"asked the peer pool for {action.num_blocks} blocks with "
            f"{len(state.peer.free_queue)} free",
        )
    return None


def peer_get_new_blocks(
    state: PoolState, action: PeerGetNewBlocks
) -> tuple[PoolState, Observation]:
    """``get_new_blocks`` on the peer pool.

    pre: invariants_hold(state)
    pre: peer_get_new_blocks_violation(state, action) is None
    post: invariants_hold(__return__[0])
    """
    refuse(peer_get_new_blocks_violation(state, action))
    assert state.peer is not None
    peer, observation = get_new_blocks(state.peer, GetNewBlocks(action.num_blocks))
    return replace(state, peer=peer), observation


# --- free_blocks ------------------------------------------------------------------------


def free_blocks_violation(state: PoolState, action: FreeBlocks) -> ContractViolation | None:
    op = action.operation
    if action.evict_first and not state.profile.has_evict_first:
        return ContractViolation("evict-first-unsupported", op)
    if action.foreign and state.peer is None and not state.profile.strong_pool_reference:
        # a weak link: the block's owning pool may be gone (with a strong one it cannot be)
        return ContractViolation(
            "foreign-route", op, action.foreign[0], "the block's owning pool is gone"
        )
    if action.foreign and state.peer is not None:
        peer_violation = out_of_range(state.peer, action.foreign, op) or over_release(
            state.peer, action.foreign, "free-held", op
        )
        if peer_violation is not None:
            return peer_violation
    return out_of_range(state, action.blocks, op) or over_release(
        state, action.blocks, "free-held", op
    )


def release(state: PoolState, blocks: tuple[int, ...], evict_first: bool) -> PoolState:
    """Drop one reference per listed block; blocks reaching 0 join the queue.

    The free rule (``flat.free_goes_to_front``): a block with no key is reused first (to
    the front: LIFO, good for locality), and so is every block when caching is off; a
    block with a key goes to the back, so that the least recently freed prefix is evicted
    first (LRU); ``evict_first`` sends every freed block to the front (its contents live
    in another tier). Releases fall back to the back where the profile says so (vLLM before
    0.24). The blocks for the front keep their order and go ahead of the old front; the
    blocks for the back keep their order and go behind the old back. Where keys die on
    free (``keys_die_on_free``), a block reaching 0 first loses its keys, each removal
    published, and is freed as a block without a key.
    """
    if state.profile.keys_die_on_free:
        state = drop_keys_of_freed(state, blocks)
    ref_cnt, queue = free_into_queue(
        queue=state.free_queue,
        ref_cnt=state.ref_cnt,
        keyed=tuple(p is not None for p in state.primary),
        blocks=blocks,
        caching=state.config.enable_caching,
        evict_first=evict_first,
        unkeyed_to_front=state.profile.unkeyed_free_to_front,
        caching_off_to_front=state.profile.caching_off_free_to_front,
    )
    return replace(state, ref_cnt=ref_cnt, free_queue=queue)


def drop_keys_of_freed(state: PoolState, blocks: tuple[int, ...]) -> PoolState:
    """Strip the keys of every listed block whose last reference this release drops (a
    pool with a slower tier behind it keeps such contents there, not in its prefix cache).
    Afterwards none of those blocks has a key; every other block keeps its keys.
    """
    released = Counter(blocks)
    for b in dict.fromkeys(blocks):
        if b != NULL_BLOCK and state.ref_cnt[b] == released[b]:
            state, removed = remove_keys(state, b)
            state = emit(state, *(BlockRemoved(hash_of(k), group_of(k)) for k in removed))
    return state


def free_blocks(state: PoolState, action: FreeBlocks) -> tuple[PoolState, Observation]:
    """Release each listed block once (a block may be listed several times).

    The null block is skipped; blocks of the peer pool are handed back to it. A block
    whose pool this one no longer sees (``state.peer is None``) can be freed only where
    blocks hold their pool strongly (``strong_pool_reference``): that pool is then still
    alive, kept so by its block, and takes the block back; this pool does not change.

    pre: invariants_hold(state)
    pre: free_blocks_violation(state, action) is None
    post: len(__return__[0].free_queue) >= len(state.free_queue)
    post: set(state.free_queue) <= set(__return__[0].free_queue)
    post: invariants_hold(__return__[0])
    """
    refuse(free_blocks_violation(state, action))
    state = release(state, action.blocks, action.evict_first)
    if action.foreign and state.peer is not None:
        state = replace(state, peer=release(state.peer, action.foreign, action.evict_first))
    return state, Observation()


# --- touch ------------------------------------------------------------------------------


def touch_violation(state: PoolState, action: Touch) -> ContractViolation | None:
    op = action.operation
    problem = out_of_range(state, action.blocks, op)
    if problem is not None:
        return problem
    for b in action.blocks:
        if b != NULL_BLOCK and state.ref_cnt[b] == 0 and state.primary[b] is None:
            return ContractViolation(
                "touch-identity", op, b, f"block {b} is free and carries no key: not a cache hit"
            )
    return None


def touch(state: PoolState, action: Touch) -> tuple[PoolState, Observation]:
    """Take one more reference on each listed block, pulling free ones out of the queue.

    pre: invariants_hold(state)
    pre: touch_violation(state, action) is None
    post: all(__return__[0].ref_cnt[b] >= 1 for b in action.blocks if b != 0)
    post: invariants_hold(__return__[0])
    """
    refuse(touch_violation(state, action))
    ref_cnt, queue = touch_counts(state.free_queue, state.ref_cnt, action.blocks)
    return replace(state, ref_cnt=ref_cnt, free_queue=queue), Observation()


# --- unpin_blocks -----------------------------------------------------------------------


def unpin_blocks_violation(state: PoolState, action: UnpinBlocks) -> ContractViolation | None:
    op = action.operation
    problem = out_of_range(state, action.blocks, op)
    if problem is not None:
        return problem
    if NULL_BLOCK in action.blocks:
        return ContractViolation("null-unpin", op, NULL_BLOCK)
    return over_release(state, action.blocks, "unpin-held", op)


def unpin_blocks(state: PoolState, action: UnpinBlocks) -> tuple[PoolState, Observation]:
    """Release each listed block once; it stays readable until the pool reuses it.

    Each block's watcher becomes ``action.watcher`` (replacing an older one). Blocks reaching
    0 go to the back of the queue whatever their key: they are last-resort candidates.

    pre: invariants_hold(state)
    pre: unpin_blocks_violation(state, action) is None
    post: all(__return__[0].watchers[b] == action.watcher for b in action.blocks)
    post: invariants_hold(__return__[0])
    """
    refuse(unpin_blocks_violation(state, action))
    ref_cnt, queue = unpin_into_queue(state.free_queue, state.ref_cnt, action.blocks)
    watchers = {**state.watchers, **dict.fromkeys(action.blocks, action.watcher)}
    state = replace(state, ref_cnt=ref_cnt, free_queue=queue, watchers=watchers)
    return state, Observation()
