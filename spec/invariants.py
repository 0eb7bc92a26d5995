"""The pool's invariants, one named predicate each (numbered as the docs' "The contract in
plain words" numbers them).

Each holds after every action. ``broken_invariants`` names the ones that do not, so a
failure says which rule broke rather than only that something did.
"""

from __future__ import annotations

from collections.abc import Callable

from .state import NULL_BLOCK, PoolState


def free_iff_unreferenced(state: PoolState) -> bool:
    """1. A real block is in the free queue exactly when its ref_cnt is 0; no count is negative."""
    free = state.free
    return all(
        state.ref_cnt[b] >= 0 and ((b in free) == (state.ref_cnt[b] == 0))
        for b in range(1, state.num_blocks)
    )


def queue_holds_each_once(state: PoolState) -> bool:
    """2. The free queue holds real blocks, each at most once (its length is the free count)."""
    queue = state.free_queue
    return len(queue) == len(set(queue)) and all(state.in_range(b) for b in queue)


def map_matches_block_keys(state: PoolState) -> bool:
    """3. A key maps to a block exactly when it is that block's primary or extra key."""
    from_map = {(key, b) for key, blocks in state.cache.items() for b in blocks}
    from_blocks = {(key, b) for b in range(state.num_blocks) for key in state.keys_of(b)}
    no_repeats = all(len(blocks) == len(set(blocks)) and blocks for blocks in state.cache.values())
    return from_map == from_blocks and no_repeats


def extra_keys_need_primary(state: PoolState) -> bool:
    """4. A block with extra keys has a primary key, which is not among its extra keys."""
    return all(
        not state.extra[b] or (primary is not None and primary.key not in state.extra[b])
        for b, primary in enumerate(state.primary)
    )


def null_block_inert(state: PoolState) -> bool:
    """5. The null block is never free, never cached and has no reuse watcher."""
    return (
        NULL_BLOCK not in state.free
        and not state.keys_of(NULL_BLOCK)
        and not state.extra[NULL_BLOCK]
        and NULL_BLOCK not in state.watchers
        and state.ref_cnt[NULL_BLOCK] == 0
    )


def no_keys_without_caching(state: PoolState) -> bool:
    """With prefix caching off, no block ever carries a key."""
    return state.config.enable_caching or not state.cache


def no_events_when_disabled(state: PoolState) -> bool:
    """A pool without KV events records none."""
    return state.config.enable_kv_cache_events or not state.events


def watchers_on_real_blocks(state: PoolState) -> bool:
    """Reuse watchers are registered only on real blocks of this pool."""
    return all(0 < b < state.num_blocks for b in state.watchers)


def peer_consistent(state: PoolState) -> bool:
    """The peer pool, when there is one, keeps every invariant too."""
    return state.peer is None or not broken_invariants(state.peer)


INVARIANTS: dict[str, Callable[[PoolState], bool]] = {
    "free-iff-unreferenced": free_iff_unreferenced,
    "queue-holds-each-once": queue_holds_each_once,
    "map-matches-block-keys": map_matches_block_keys,
    "extra-keys-need-primary": extra_keys_need_primary,
    "null-block-inert": null_block_inert,
    "no-keys-without-caching": no_keys_without_caching,
    "no-events-when-disabled": no_events_when_disabled,
    "watchers-on-real-blocks": watchers_on_real_blocks,
    "peer-consistent": peer_consistent,
}


def broken_invariants(state: PoolState) -> list[str]:
    """The names of the invariants ``state`` breaks (empty when all hold)."""
    return [name for name, holds in INVARIANTS.items() if not holds(state)]


def invariants_hold(state: PoolState) -> bool:
    """Whether every invariant holds."""
    return not broken_invariants(state)
