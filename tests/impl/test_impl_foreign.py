"""Blocks of another pool: routed by free_blocks, refused elsewhere."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
from kvpool.impl import BlockPool, BlockPoolError, KVCacheBlock, Request

Snapshot = Callable[[BlockPool], dict[str, Any]]
Check = Callable[[BlockPool], None]


def ids(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def test_free_blocks_routes_foreign_blocks_to_their_pool(check: Check) -> None:
    mine = BlockPool(5, enable_caching=True, hash_block_size=2)
    other = BlockPool(5, enable_caching=True, hash_block_size=2)
    a, b = mine.get_new_blocks(2)
    x, y = other.get_new_blocks(2)
    req = Request.from_tokens("r", [1, 2], 2)
    other.cache_full_blocks(req, [y], 0, 1, 2, 0)
    mine.free_blocks([y, a, x, b])
    assert ids(mine) == [1, 2, 3, 4]
    assert ids(other) == [1, 3, 4, 2]  # x unkeyed to front; y keyed to back
    check(mine)
    check(other)


def test_routing_passes_evict_first(check: Check) -> None:
    mine = BlockPool(3, enable_caching=True, hash_block_size=2)
    other = BlockPool(3, enable_caching=True, hash_block_size=2)
    (y,) = other.get_new_blocks(1)
    other.cache_full_blocks(Request.from_tokens("r", [1, 2], 2), [y], 0, 1, 2, 0)
    mine.free_blocks([y], evict_first=True)
    assert ids(other) == [1, 2]
    check(other)


def test_foreign_over_free_refuses_the_whole_call(snapshot: Snapshot) -> None:
    mine = BlockPool(4, enable_caching=True, hash_block_size=2)
    other = BlockPool(4, enable_caching=True, hash_block_size=2)
    (a,) = mine.get_new_blocks(1)
    (x,) = other.get_new_blocks(1)
    mine_before, other_before = snapshot(mine), snapshot(other)
    with pytest.raises(BlockPoolError) as err:
        mine.free_blocks([a, x, x])
    assert err.value.rule == "free-held" and err.value.block_id == x.block_id
    assert snapshot(mine) == mine_before and snapshot(other) == other_before


def test_block_of_a_dead_pool_is_refused(snapshot: Snapshot) -> None:
    mine = BlockPool(4, enable_caching=True, hash_block_size=2)
    (a,) = mine.get_new_blocks(1)
    other = BlockPool(4, enable_caching=True, hash_block_size=2)
    (x,) = other.get_new_blocks(1)
    del other
    gc.collect()
    assert x.pool is not None and x.pool() is None
    before = snapshot(mine)
    with pytest.raises(BlockPoolError) as err:
        mine.free_blocks([a, x])
    assert err.value.rule == "foreign-route"
    assert snapshot(mine) == before


def test_block_without_pool_is_refused() -> None:
    mine = BlockPool(4, enable_caching=True, hash_block_size=2)
    stray = KVCacheBlock(1)
    stray.ref_cnt = 1
    with pytest.raises(BlockPoolError) as err:
        mine.free_blocks([stray])
    assert err.value.rule == "foreign-route"


def test_blocks_do_not_keep_their_pool_alive() -> None:
    pool = BlockPool(3, enable_caching=True, hash_block_size=2)
    blocks = pool.get_new_blocks(2)
    del pool
    gc.collect()
    assert all(b.pool is not None and b.pool() is None for b in blocks)


def test_foreign_null_block_is_skipped() -> None:
    mine = BlockPool(3, enable_caching=True, hash_block_size=2)
    other = BlockPool(3, enable_caching=True, hash_block_size=2)
    mine.free_blocks([other.null_block])
    mine.touch([other.null_block])
    assert ids(mine) == [1, 2] and ids(other) == [1, 2]
