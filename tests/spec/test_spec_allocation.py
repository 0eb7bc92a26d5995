"""Effects of get_new_blocks, free_blocks, touch, unpin_blocks and the peer pool, via step()."""

from __future__ import annotations

from dataclasses import replace

from kvpool.spec import (
    SEED,
    BlockRemoved,
    CacheFullBlocks,
    FreeBlocks,
    GetNewBlocks,
    PeerGetNewBlocks,
    PoolConfig,
    PoolState,
    Touch,
    UnpinBlocks,
    initial_state,
    run,
    step,
)
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.keys import make_key

HASHES = request_block_hashes(list(range(100, 108)), 1)


def cached_pool(n: int = 8, **config: object) -> PoolState:
    """Blocks 1, 2, 3 held and cached as a 3-token prefix (hash_block_size = block_size = 1)."""
    state = initial_state(PoolConfig(num_gpu_blocks=n, **config))  # type: ignore[arg-type]
    return run(state, GetNewBlocks(3), CacheFullBlocks(HASHES, (1, 2, 3), 0, 3, 1))


# --- get_new_blocks ---------------------------------------------------------------------


def test_get_new_blocks_pops_from_the_front_in_queue_order() -> None:
    state = initial_state(PoolConfig(num_gpu_blocks=6))
    state, obs = step(state, GetNewBlocks(2))
    assert obs.result == (1, 2)
    assert state.free_queue == (3, 4, 5)
    assert state.ref_cnt == (0, 1, 1, 0, 0, 0)


def test_get_new_blocks_zero_changes_nothing() -> None:
    state = initial_state(PoolConfig(num_gpu_blocks=4))
    after, obs = step(state, GetNewBlocks(0))
    assert obs.result == ()
    assert after == state


def test_get_new_blocks_fires_and_drops_reuse_watchers() -> None:
    state = initial_state(PoolConfig(num_gpu_blocks=4))
    state = run(state, GetNewBlocks(2), UnpinBlocks((2,), "w2"), UnpinBlocks((1,), "w1"))
    assert state.free_queue == (3, 2, 1)
    state, obs = step(state, GetNewBlocks(3))
    assert obs.result == (3, 2, 1)
    assert obs.fired == ((2, "w2"), (1, "w1"))
    assert state.watchers == {}


def test_get_new_blocks_strips_keys_with_block_removed_events() -> None:
    state = run(cached_pool(n=4), FreeBlocks((3, 2, 1)))
    assert state.free_queue == (3, 2, 1)
    state = replace(state, events=())
    state, obs = step(state, GetNewBlocks(2))
    assert obs.result == (3, 2)
    assert state.keys_of(3) == () and state.keys_of(2) == ()
    assert state.keys_of(1) == (make_key(HASHES[0], 0),)
    assert set(state.cache) == {make_key(HASHES[0], 0)}
    assert state.events == (BlockRemoved(HASHES[2], 0), BlockRemoved(HASHES[1], 0))


# --- free_blocks ------------------------------------------------------------------------


def test_free_unkeyed_blocks_go_to_front_in_given_order_ahead_of_old_front() -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=8)), GetNewBlocks(3))
    state = run(state, FreeBlocks((3, 1)))
    assert state.free_queue == (3, 1, 4, 5, 6, 7)
    assert state.ref_cnt[1] == state.ref_cnt[3] == 0
    assert state.ref_cnt[2] == 1


def test_free_keyed_blocks_go_to_back_in_given_order() -> None:
    state = run(cached_pool(), FreeBlocks((3, 1, 2)))
    assert state.free_queue == (4, 5, 6, 7, 3, 1, 2)


def test_free_mixed_batch_splits_front_and_back() -> None:
    state = run(cached_pool(), GetNewBlocks(1))  # block 4, unkeyed
    state = run(state, FreeBlocks((2, 4, 1)))
    assert state.free_queue == (4, 5, 6, 7, 2, 1)


def test_free_evict_first_sends_keyed_blocks_to_front_in_given_order() -> None:
    state = run(cached_pool(), FreeBlocks((3, 1), evict_first=True))
    assert state.free_queue == (3, 1, 4, 5, 6, 7)
    assert state.keys_of(3) and state.keys_of(1)


def test_free_with_caching_off_uses_the_caching_off_policy_not_the_unkeyed_one() -> None:
    # Both seed knobs are True, so flip one at a time to show which one decides.
    to_front = replace(SEED, name="x", unkeyed_free_to_front=False)
    to_back = replace(SEED, name="y", caching_off_free_to_front=False)
    config = PoolConfig(num_gpu_blocks=5, enable_caching=False)
    front = run(initial_state(config, to_front), GetNewBlocks(2), FreeBlocks((2, 1)))
    back = run(initial_state(config, to_back), GetNewBlocks(2), FreeBlocks((2, 1)))
    assert front.free_queue == (2, 1, 3, 4)
    assert back.free_queue == (3, 4, 2, 1)


def test_free_seed_caching_off_goes_to_front() -> None:
    config = PoolConfig(num_gpu_blocks=5, enable_caching=False)
    state = run(initial_state(config), GetNewBlocks(3), FreeBlocks((1, 3)))
    assert state.free_queue == (1, 3, 4)


def test_free_is_a_multiset_each_listing_drops_one_reference() -> None:
    state = run(cached_pool(), Touch((1, 1)))
    assert state.ref_cnt[1] == 3
    partly = run(state, FreeBlocks((1, 1)))
    assert partly.ref_cnt[1] == 1
    assert 1 not in partly.free_queue
    fully = run(state, FreeBlocks((1, 1, 1)))
    assert fully.ref_cnt[1] == 0
    assert fully.free_queue.count(1) == 1
    assert fully.free_queue[-1] == 1


def test_free_skips_the_null_block() -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=4)), GetNewBlocks(1))
    state = run(state, FreeBlocks((0, 1, 0)))
    assert state.ref_cnt[0] == 0
    assert 0 not in state.free_queue
    assert state.free_queue == (1, 2, 3)


def test_free_hands_foreign_blocks_to_the_peer_pool() -> None:
    state = initial_state(PoolConfig(num_gpu_blocks=4, peer_blocks=3))
    assert state.peer is not None and state.peer.free_queue == (1, 2)
    state, obs = step(state, PeerGetNewBlocks(2))
    assert obs.result == (1, 2)
    assert state.peer is not None and state.peer.free_queue == ()
    own_before = (state.ref_cnt, state.free_queue)
    state = run(state, FreeBlocks((), foreign=(2, 1)))
    assert state.peer is not None
    assert state.peer.free_queue == (2, 1)
    assert state.peer.ref_cnt == (0, 0, 0)
    assert (state.ref_cnt, state.free_queue) == own_before


def test_free_own_and_foreign_blocks_in_one_call() -> None:
    state = initial_state(PoolConfig(num_gpu_blocks=4, peer_blocks=3))
    state = run(state, GetNewBlocks(1), PeerGetNewBlocks(1))
    state = run(state, FreeBlocks((1,), foreign=(1,)))
    assert state.free_queue == (1, 2, 3)
    assert state.peer is not None and state.peer.free_queue == (1, 2)


# --- touch ------------------------------------------------------------------------------


def test_touch_pulls_a_free_cached_block_out_of_the_middle_of_the_queue() -> None:
    state = run(cached_pool(), FreeBlocks((1, 2, 3)))
    assert state.free_queue == (4, 5, 6, 7, 1, 2, 3)
    state = run(state, Touch((2,)))
    assert state.free_queue == (4, 5, 6, 7, 1, 3)
    assert state.ref_cnt[2] == 1
    assert state.keys_of(2) == (make_key(HASHES[1], 0),)


def test_touch_held_block_adds_a_reference_and_skips_null() -> None:
    state = run(cached_pool(), Touch((0, 1, 0, 1)))
    assert state.ref_cnt[1] == 3
    assert state.ref_cnt[0] == 0
    assert 0 not in state.free_queue


# --- unpin_blocks -----------------------------------------------------------------------


def test_unpin_sends_even_unkeyed_blocks_to_the_back_and_registers_watcher() -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=5)), GetNewBlocks(2))
    state = run(state, UnpinBlocks((1,), "w"))
    assert state.free_queue == (3, 4, 1)
    assert state.ref_cnt[1] == 0
    assert state.watchers == {1: "w"}


def test_unpin_of_shared_block_keeps_it_held_and_later_watcher_replaces() -> None:
    state = run(initial_state(PoolConfig(num_gpu_blocks=3)), GetNewBlocks(1), Touch((1,)))
    state = run(state, UnpinBlocks((1,), "old"))
    assert state.ref_cnt[1] == 1 and 1 not in state.free_queue
    state = run(state, UnpinBlocks((1,), "new"))
    assert state.watchers == {1: "new"}
    assert state.free_queue == (2, 1)
    _, obs = step(state, GetNewBlocks(2))
    assert obs.fired == ((1, "new"),)
