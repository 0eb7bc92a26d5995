"""Handing out, freeing, touching and unpinning blocks."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kvpool.impl import BlockPool, BlockRemoved, KVCacheBlock, Request

Check = Callable[[BlockPool], None]


def free_ids(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def cached_pool(n: int = 8, events: bool = False) -> BlockPool:
    return BlockPool(n, enable_caching=True, hash_block_size=2, enable_kv_cache_events=events)


def cache_blocks(pool: BlockPool, blocks: list[KVCacheBlock], tokens: list[int]) -> Request:
    req = Request.from_tokens("r", tokens, pool.hash_block_size)
    pool.cache_full_blocks(req, blocks, 0, len(blocks), pool.hash_block_size, 0)
    return req


def test_construction_pops_null_block_and_links_every_block(check: Check) -> None:
    pool = BlockPool(5, enable_caching=True, hash_block_size=4)
    assert pool.null_block is pool.blocks[0] and pool.null_block.is_null
    assert free_ids(pool) == [1, 2, 3, 4]
    assert pool.get_num_free_blocks() == 4
    assert all(b.pool is not None and b.pool() is pool for b in pool.blocks)
    assert (pool.num_gpu_blocks, pool.enable_caching, pool.hash_block_size) == (5, True, 4)
    assert pool.enable_kv_cache_events is False
    check(pool)


def test_get_new_blocks_pops_front_in_order_with_one_hold(check: Check) -> None:
    pool = cached_pool()
    got = pool.get_new_blocks(3)
    assert [b.block_id for b in got] == [1, 2, 3]
    assert all(b.ref_cnt == 1 for b in got)
    assert free_ids(pool) == [4, 5, 6, 7]
    assert pool.get_new_blocks(0) == []
    check(pool)


def test_get_new_blocks_strips_keys_of_cached_free_block(check: Check) -> None:
    pool = cached_pool(4, events=True)
    blocks = pool.get_new_blocks(3)
    req = cache_blocks(pool, blocks[:1], [1, 2])
    key = blocks[0].block_hash
    assert key is not None
    pool.free_blocks(blocks)  # block 1 keyed -> back; 2, 3 unkeyed -> front
    pool.take_events()
    assert free_ids(pool) == [2, 3, 1]
    got = pool.get_new_blocks(3)
    assert got[2] is blocks[0] and got[2].block_hash is None
    assert pool.get_cached_block(req.block_hashes[0], [0]) is None
    assert pool.take_events() == [BlockRemoved([req.block_hashes[0]], "GPU", 0)]
    check(pool)


def test_free_blocks_of_unkeyed_blocks_go_to_front_in_given_order(check: Check) -> None:
    pool = cached_pool()
    a, b, c = pool.get_new_blocks(3)
    pool.free_blocks([c, a, b])
    assert free_ids(pool) == [3, 1, 2, 4, 5, 6, 7]
    check(pool)


def test_free_blocks_of_keyed_blocks_go_to_back_in_given_order(check: Check) -> None:
    pool = cached_pool()
    blocks = pool.get_new_blocks(3)
    cache_blocks(pool, blocks, [1, 2, 3, 4, 5, 6])
    pool.free_blocks(blocks[::-1])
    assert free_ids(pool) == [4, 5, 6, 7, 3, 2, 1]
    check(pool)


def test_free_blocks_mixed_batch_splits_front_and_back(check: Check) -> None:
    pool = cached_pool()
    blocks = pool.get_new_blocks(4)
    cache_blocks(pool, blocks[:2], [1, 2, 3, 4])
    pool.free_blocks(blocks[::-1])  # 4, 3 unkeyed; 2, 1 keyed
    assert free_ids(pool) == [4, 3, 5, 6, 7, 2, 1]
    check(pool)


def test_free_blocks_evict_first_sends_keyed_blocks_to_front(check: Check) -> None:
    pool = cached_pool()
    blocks = pool.get_new_blocks(2)
    cache_blocks(pool, blocks, [1, 2, 3, 4])
    pool.free_blocks(blocks, evict_first=True)
    assert free_ids(pool) == [1, 2, 3, 4, 5, 6, 7]
    assert blocks[0].block_hash is not None  # still hittable
    check(pool)


def test_free_blocks_with_caching_off_goes_to_front(check: Check) -> None:
    pool = BlockPool(5, enable_caching=False, hash_block_size=2)
    a, b = pool.get_new_blocks(2)
    pool.free_blocks([b, a])
    assert free_ids(pool) == [2, 1, 3, 4]
    check(pool)


def test_free_blocks_multiset_releases_each_occurrence(check: Check) -> None:
    pool = cached_pool()
    a, b = pool.get_new_blocks(2)
    pool.touch([a, a])  # ref 3
    pool.free_blocks([a, b, a])
    assert (a.ref_cnt, b.ref_cnt) == (1, 0)
    assert free_ids(pool)[0] == 2
    pool.free_blocks([a])
    assert free_ids(pool)[:2] == [1, 2]
    check(pool)


def test_free_blocks_order_is_the_order_blocks_reach_zero(check: Check) -> None:
    pool = cached_pool()
    a, b = pool.get_new_blocks(2)
    pool.touch([a])  # a held twice
    pool.free_blocks([a, b, a])  # b reaches 0 first, then a
    assert free_ids(pool)[:2] == [2, 1]
    check(pool)


def test_free_blocks_skips_null_block_and_accepts_iterators(check: Check) -> None:
    pool = cached_pool()
    a = pool.get_new_blocks(1)[0]
    before = pool.null_block.ref_cnt
    pool.free_blocks(iter([pool.null_block, a, pool.null_block]))
    assert pool.null_block.ref_cnt == before
    assert free_ids(pool)[0] == 1
    check(pool)


def test_touch_takes_a_free_cached_block_out_of_queue(check: Check) -> None:
    pool = cached_pool()
    blocks = pool.get_new_blocks(3)
    cache_blocks(pool, blocks, [1, 2, 3, 4, 5, 6])
    pool.free_blocks(blocks)
    pool.touch([blocks[1]])
    assert blocks[1].ref_cnt == 1
    assert 2 not in free_ids(pool)
    assert free_ids(pool) == [4, 5, 6, 7, 1, 3]
    check(pool)


def test_touch_multiset_and_held_blocks(check: Check) -> None:
    pool = cached_pool()
    blocks = pool.get_new_blocks(2)
    cache_blocks(pool, blocks, [1, 2, 3, 4])
    pool.free_blocks([blocks[0]])
    pool.touch([blocks[0], blocks[0], blocks[1], pool.null_block])
    assert (blocks[0].ref_cnt, blocks[1].ref_cnt) == (2, 2)
    check(pool)


def test_unpin_sends_blocks_to_back_whatever_their_key(check: Check) -> None:
    pool = cached_pool()
    a, b = pool.get_new_blocks(2)
    pool.unpin_blocks([b, a], lambda blk: None)
    assert free_ids(pool) == [3, 4, 5, 6, 7, 2, 1]
    assert set(pool._reuse_watchers) == {1, 2}
    check(pool)


def test_unpin_registers_watcher_even_when_still_held(check: Check) -> None:
    pool = cached_pool()
    b = pool.get_new_blocks(1)[0]
    cache_blocks(pool, [b], [1, 2])
    pool.touch([b])  # a second holder
    fired: list[int] = []
    pool.unpin_blocks([b], lambda blk: fired.append(blk.block_id))
    assert b.ref_cnt == 1 and b.block_id in pool._reuse_watchers
    assert b.block_id not in free_ids(pool)
    assert fired == []
    check(pool)


def test_later_unpin_replaces_the_watcher() -> None:
    pool = cached_pool(3)
    a, b = pool.get_new_blocks(2)
    first: list[int] = []
    second: list[int] = []
    cache_blocks(pool, [a, b], [1, 2, 3, 4])
    pool.touch([a])
    pool.unpin_blocks([a], lambda blk: first.append(blk.block_id))
    pool.unpin_blocks([a], lambda blk: second.append(blk.block_id))
    pool.free_blocks([b])
    pool.get_new_blocks(2)
    assert first == [] and second == [1]


def test_watcher_fires_once_on_reuse_then_is_dropped(check: Check) -> None:
    pool = cached_pool(3)
    a, b = pool.get_new_blocks(2)
    seen: list[tuple[int, int, bool]] = []

    def watcher(blk: KVCacheBlock) -> None:
        # Fired before the block changes hands: still free, keys not yet stripped.
        seen.append((blk.block_id, blk.ref_cnt, blk.block_hash is not None))

    cache_blocks(pool, [a], [1, 2])
    pool.unpin_blocks([a, b], watcher)
    assert free_ids(pool) == [1, 2]
    got = pool.get_new_blocks(1)
    assert got == [a] and seen == [(1, 0, True)]
    assert 1 not in pool._reuse_watchers
    pool.free_blocks(got)
    pool.get_new_blocks(2)
    assert seen == [(1, 0, True), (2, 0, False)]
    assert pool._reuse_watchers == {}
    check(pool)


def test_touch_does_not_fire_watcher(check: Check) -> None:
    pool = cached_pool(3)
    a = pool.get_new_blocks(1)[0]
    cache_blocks(pool, [a], [1, 2])
    fired: list[int] = []
    pool.unpin_blocks([a], lambda blk: fired.append(blk.block_id))
    pool.touch([a])
    assert fired == [] and a.ref_cnt == 1
    assert 1 in pool._reuse_watchers
    check(pool)


def test_usage_counts_held_blocks_over_usable_blocks() -> None:
    pool = cached_pool(5)
    assert pool.get_usage() == 0.0
    blocks = pool.get_new_blocks(2)
    assert pool.get_usage() == pytest.approx(0.5)
    cache_blocks(pool, blocks, [1, 2, 3, 4])
    pool.free_blocks(blocks)
    assert pool.get_usage() == 0.0  # cached free blocks count as free


def test_single_block_pool_has_no_usable_block() -> None:
    pool = BlockPool(1, enable_caching=True, hash_block_size=1)
    assert pool.get_num_free_blocks() == 0
    assert pool.get_usage() == 0.0
    assert pool.get_new_blocks(0) == []


def test_is_block_writable_only_for_sole_unkeyed_holder() -> None:
    pool = cached_pool()
    a, b = pool.get_new_blocks(2)
    assert pool.is_block_writable(a)
    assert not pool.is_block_writable(pool.null_block)
    cache_blocks(pool, [b], [1, 2])
    assert not pool.is_block_writable(b)
    pool.touch([a])
    assert not pool.is_block_writable(a)
    pool.free_blocks([a, a])
    assert not pool.is_block_writable(a)


def test_only_block_0_is_null_and_every_link_names_the_pool() -> None:
    pool = BlockPool(4, enable_caching=True, hash_block_size=2)
    assert [b.is_null for b in pool.blocks] == [True, False, False, False]
    assert {b.pool() for b in pool.blocks if b.pool is not None} == {pool}
    assert pool.blocks[0].pool is not pool.blocks[1].pool  # the null block's own link
    assert KVCacheBlock(0).is_null is False and KVCacheBlock(0).pool is None
