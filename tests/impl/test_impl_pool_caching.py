"""Registering, looking up, evicting and moving prefix-cache keys; events."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kvpool.impl import (
    AllBlocksCleared,
    BlockPool,
    BlockPoolError,
    BlockRemoved,
    BlockStored,
    KVCacheBlock,
    LoRARequest,
    Request,
    make_block_hash_with_group_id,
)

Check = Callable[[BlockPool], None]


def pool_with(n: int = 10, hbs: int = 2, events: bool = True) -> BlockPool:
    return BlockPool(n, enable_caching=True, hash_block_size=hbs, enable_kv_cache_events=events)


def key(h: bytes, group: int = 0) -> bytes:
    return make_block_hash_with_group_id(h, group)


def map_ids(pool: BlockPool, k: bytes) -> list[int]:
    return [b.block_id for b in pool.cached_block_hash_to_block.get_all_blocks(k)]


# ------------------------------------------------------------ cache_full_blocks


def test_cache_full_blocks_keys_each_block_with_its_chained_hash(check: Check) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(7)), 2)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(req, blocks, 0, 3, 2, 0)
    for i, blk in enumerate(blocks):
        assert blk.block_hash == key(req.block_hashes[i])
        assert blk.block_hash_num_tokens == (i + 1) * 2
        assert pool.get_cached_block(req.block_hashes[i], [0]) == [blk]
    check(pool)


def test_cache_full_blocks_views_hashes_at_block_size(check: Check) -> None:
    # block_size 6 = 3 hash blocks of 2: block j takes the last fine hash inside it.
    pool = pool_with()
    req = Request.from_tokens("r", list(range(12)), 2)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, blocks, 0, 2, 6, 3)
    assert blocks[0].block_hash == key(req.block_hashes[2], 3)
    assert blocks[1].block_hash == key(req.block_hashes[5], 3)
    assert (blocks[0].block_hash_num_tokens, blocks[1].block_hash_num_tokens) == (6, 12)
    ev = pool.take_events()
    assert ev == [
        BlockStored(
            block_hashes=[req.block_hashes[2], req.block_hashes[5]],
            parent_block_hash=None,
            token_ids=list(range(12)),
            block_size=6,
            lora_id=None,
            medium="GPU",
            lora_name=None,
            group_idx=3,
        )
    ]
    check(pool)


def test_cache_full_blocks_starts_at_num_cached_with_parent_in_event(check: Check) -> None:
    pool = pool_with()
    lora = LoRARequest(adapter_id=7, name="ad")
    req = Request.from_tokens("r", list(range(8)), 2, lora_request=lora)
    blocks = pool.get_new_blocks(4)
    pool.cache_full_blocks(req, blocks, 1, 3, 2, 0)
    assert blocks[0].block_hash is None and blocks[3].block_hash is None
    assert blocks[1].block_hash == key(req.block_hashes[1])
    assert blocks[2].block_hash == key(req.block_hashes[2])
    assert pool.take_events() == [
        BlockStored(
            block_hashes=req.block_hashes[1:3],
            parent_block_hash=req.block_hashes[0],
            token_ids=[2, 3, 4, 5],
            block_size=2,
            lora_id=7,
            medium="GPU",
            lora_name="ad",
            group_idx=0,
        )
    ]
    check(pool)


def test_cache_full_blocks_skips_null_and_masked_blocks(check: Check) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(8)), 2)
    a, b, c = pool.get_new_blocks(3)
    blocks = [pool.null_block, a, b, c]
    pool.cache_full_blocks(req, blocks, 0, 4, 2, 1, block_mask=[True, True, False, True])
    assert pool.null_block.block_hash is None
    assert a.block_hash == key(req.block_hashes[1], 1)
    assert b.block_hash is None
    assert c.block_hash == key(req.block_hashes[3], 1)
    (ev,) = pool.take_events()
    assert isinstance(ev, BlockStored)
    assert ev.block_hashes == [req.block_hashes[1], req.block_hashes[3]]
    assert ev.token_ids == list(range(8))
    check(pool)


def test_cache_full_blocks_emits_one_event_even_if_all_skipped() -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(4)), 2)
    (a,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(req, [a, pool.null_block], 0, 2, 2, 0, block_mask=[False, True])
    (ev,) = pool.take_events()
    assert isinstance(ev, BlockStored) and ev.block_hashes == []


def test_cache_full_blocks_with_nothing_new_is_a_noop() -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(4)), 2)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, blocks, 2, 2, 2, 0)
    assert pool.take_events() == []
    assert all(b.block_hash is None for b in blocks)


def test_duplicate_keys_are_kept_and_lookup_returns_earliest(check: Check) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(4)), 2)
    a, b = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, [a], 0, 1, 2, 0)
    pool.cache_full_blocks(req, [b], 0, 1, 2, 0)
    k = key(req.block_hashes[0])
    assert map_ids(pool, k) == [1, 2]
    assert pool.get_cached_block(req.block_hashes[0], [0]) == [a]
    pool.free_blocks([a])
    pool.evict_blocks([1])
    assert pool.get_cached_block(req.block_hashes[0], [0]) == [b]
    check(pool)


def test_cache_full_blocks_promotes_a_partial_entry(check: Check) -> None:
    pool = pool_with(hbs=2)
    short = Request.from_tokens("r", list(range(2)), 2)
    full = Request.from_tokens("r", list(range(4)), 2)
    (a,) = pool.get_new_blocks(1)
    k_partial = pool.cache_partial_block(short, a, 2, 0, 4)
    pool.take_events()
    pool.cache_full_blocks(full, [a], 0, 1, 4, 0)
    assert a.block_hash == key(full.block_hashes[1]) and a.block_hash_num_tokens == 4
    assert k_partial is not None and map_ids(pool, k_partial) == []
    ev = pool.take_events()
    assert ev[0] == BlockRemoved([short.block_hashes[0]], "GPU", 0)
    assert isinstance(ev[1], BlockStored) and ev[1].block_hashes == [full.block_hashes[1]]
    check(pool)


# ----------------------------------------------------------- cache_partial_block


def test_cache_partial_block_sets_primary_and_emits_stored(check: Check) -> None:
    pool = pool_with(hbs=2)
    req = Request.from_tokens("r", list(range(6)), 2)
    (a,) = pool.get_new_blocks(1)
    k = pool.cache_partial_block(req, a, 4, 2, 8)
    assert k == key(req.block_hashes[1], 2)
    assert a.block_hash == k and a.block_hash_num_tokens == 4
    # the event covers the entry's block from its start: the request's first block, so
    # no parent (the fine hash before, never stored, is what upstream names: issue 58119)
    assert pool.take_events() == [
        BlockStored(
            block_hashes=[req.block_hashes[1]],
            parent_block_hash=None,
            token_ids=[0, 1, 2, 3],
            block_size=4,
            lora_id=None,
            medium="GPU",
            lora_name=None,
            group_idx=2,
        )
    ]
    check(pool)


def test_a_partial_entry_in_a_later_block_follows_the_block_before() -> None:
    pool = pool_with(hbs=2)
    req = Request.from_tokens("r", list(range(12)), 2)
    (a,) = pool.get_new_blocks(1)
    pool.cache_partial_block(req, a, 10, 0, 8)  # block 1 of 8 tokens, entry at 10 tokens
    (ev,) = pool.take_events()
    assert isinstance(ev, BlockStored)
    assert ev.parent_block_hash == req.block_hashes[3]  # the prefix of block 0, 8 tokens
    assert ev.token_ids == [8, 9] and ev.block_size == 2


def test_cache_partial_block_first_hash_has_no_parent() -> None:
    pool = pool_with(hbs=2)
    req = Request.from_tokens("r", list(range(2)), 2)
    (a,) = pool.get_new_blocks(1)
    pool.cache_partial_block(req, a, 2, 0, 2)
    (ev,) = pool.take_events()
    assert isinstance(ev, BlockStored)
    assert ev.parent_block_hash is None and ev.token_ids == [0, 1]


def test_cache_partial_block_again_is_a_silent_noop(check: Check) -> None:
    pool = pool_with(hbs=2)
    req = Request.from_tokens("r", list(range(4)), 2)
    (a,) = pool.get_new_blocks(1)
    k1 = pool.cache_partial_block(req, a, 4, 0, 4)
    pool.take_events()
    k2 = pool.cache_partial_block(req, a, 4, 0, 4)
    assert k1 == k2 and pool.take_events() == []
    assert map_ids(pool, k2) == [1]
    check(pool)


def test_cache_partial_block_longer_prefix_replaces_shorter_primary(check: Check) -> None:
    pool = pool_with(hbs=2)
    req = Request.from_tokens("r", list(range(6)), 2)
    (a,) = pool.get_new_blocks(1)
    k2 = pool.cache_partial_block(req, a, 2, 0, 8)
    k4 = pool.cache_partial_block(req, a, 4, 0, 8)
    assert a.block_hash == k4 and a.block_hash_num_tokens == 4
    assert k2 is not None and map_ids(pool, k2) == []
    ev = pool.take_events()
    assert [type(e).__name__ for e in ev] == ["BlockStored", "BlockRemoved", "BlockStored"]
    check(pool)


def test_cache_partial_block_shorter_prefix_becomes_extra_key(check: Check) -> None:
    pool = pool_with(hbs=2)
    req = Request.from_tokens("r", list(range(6)), 2)
    (a,) = pool.get_new_blocks(1)
    k4 = pool.cache_partial_block(req, a, 4, 0, 8)
    k2 = pool.cache_partial_block(req, a, 2, 0, 8)
    assert k2 is not None and k4 is not None
    assert a.block_hash == k4
    assert pool.cached_block_hashes_by_block[1] == {k2}
    assert pool.get_cached_block(req.block_hashes[0], [0]) == [a]
    check(pool)
    # Evicting the block removes both keys at once.
    pool.take_events()
    pool.evict_blocks([1])
    removed = pool.take_events()
    assert sorted(e.block_hashes[0] for e in removed if isinstance(e, BlockRemoved)) == sorted(
        [req.block_hashes[0], req.block_hashes[1]]
    )
    assert len(pool.cached_block_hash_to_block) == 0
    check(pool)


def test_cache_partial_block_replace_existing_hashes_drops_all_keys(check: Check) -> None:
    pool = pool_with(hbs=2)
    req = Request.from_tokens("r", list(range(6)), 2)
    (a,) = pool.get_new_blocks(1)
    pool.cache_partial_block(req, a, 4, 0, 8)
    pool.cache_partial_block(req, a, 2, 0, 8)
    pool.take_events()
    k = pool.cache_partial_block(req, a, 4, 0, 8, replace_existing_hashes=True)
    assert a.block_hash == k and a.block_hash_num_tokens == 4
    assert 1 not in pool.cached_block_hashes_by_block
    ev = pool.take_events()
    assert sum(isinstance(e, BlockRemoved) for e in ev) == 2
    assert isinstance(ev[-1], BlockStored)
    check(pool)


def test_cache_partial_block_on_null_returns_none() -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(4)), 2)
    assert pool.cache_partial_block(req, pool.null_block, 2, 0, 2) is None
    assert pool.take_events() == [] and len(pool.cached_block_hash_to_block) == 0


# ------------------------------------------------------------- lookups, evicts


def test_get_cached_block_is_all_or_nothing_across_groups(check: Check) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(2)), 2)
    a, b = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, [a], 0, 1, 2, 0)
    assert pool.get_cached_block(req.block_hashes[0], [0, 1]) is None
    pool.cache_full_blocks(req, [b], 0, 1, 2, 1)
    assert pool.get_cached_block(req.block_hashes[0], [1, 0]) == [b, a]
    assert pool.get_cached_block(b"nope", [0]) is None
    check(pool)


def test_get_cached_prefix_is_get_cached_block_until_the_first_miss(check: Check) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(8)), 2)
    a, b, c, d = pool.get_new_blocks(4)
    pool.cache_full_blocks(req, [a, b, c], 0, 3, 2, 0)
    pool.cache_full_blocks(req, [d], 0, 1, 2, 2)
    hashes = req.block_hashes
    assert pool.get_cached_prefix(iter(hashes), 0) == [a, b, c]
    assert pool.get_cached_prefix([hashes[0], b"nope", hashes[2]], 0) == [a]
    assert pool.get_cached_prefix(hashes, 2) == [d]
    assert pool.get_cached_prefix(hashes, 7) == []
    pool.evict_blocks([b.block_id])
    assert pool.get_cached_prefix(hashes, 0) == [a]
    check(pool)


def test_get_cached_prefix_takes_the_earliest_of_duplicates(check: Check) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(4)), 2)
    a, b, c = pool.get_new_blocks(3)
    pool.cache_full_blocks(req, [a], 0, 1, 2, 0)
    pool.cache_full_blocks(req, [b, c], 0, 2, 2, 0)  # b duplicates a's key
    assert pool.get_cached_prefix(req.block_hashes, 0) == [a, c]
    check(pool)


def test_get_cached_prefix_refuses_a_group_id_out_of_range() -> None:
    pool = pool_with()
    with pytest.raises(BlockPoolError, match="group-id-range"):
        pool.get_cached_prefix([b"h"], -1)


def test_evict_blocks_strips_keys_without_freeing_or_moving(check: Check) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(4)), 2)
    a, b = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, [a, b], 0, 2, 2, 0)
    pool.free_blocks([a])
    fired: list[int] = []
    pool.touch([b])
    pool.unpin_blocks([b], lambda blk: fired.append(blk.block_id))
    order = [x.block_id for x in pool.free_block_queue.get_all_free_blocks()]
    pool.take_events()
    pool.evict_blocks([1, 2, 5, 0])
    assert a.block_hash is None and b.block_hash is None
    assert (a.ref_cnt, b.ref_cnt) == (0, 1)
    assert [x.block_id for x in pool.free_block_queue.get_all_free_blocks()] == order
    assert fired == [] and 2 in pool._reuse_watchers
    assert pool.take_events() == [
        BlockRemoved([req.block_hashes[0]], "GPU", 0),
        BlockRemoved([req.block_hashes[1]], "GPU", 0),
    ]
    check(pool)


# ------------------------------------------------------------ move_block_hashes


def test_move_block_hashes_repoints_every_key_without_events(check: Check) -> None:
    pool = pool_with(hbs=2)
    req = Request.from_tokens("r", list(range(6)), 2)
    src, dst, _other = pool.get_new_blocks(3)
    k4 = pool.cache_partial_block(req, src, 4, 0, 8)
    k2 = pool.cache_partial_block(req, src, 2, 0, 8)
    assert k2 is not None and k4 is not None
    pool.take_events()
    pool.move_block_hashes(src, dst)
    assert src.block_hash is None and src.block_hash_num_tokens is None
    assert 1 not in pool.cached_block_hashes_by_block
    assert dst.block_hash == k4 and dst.block_hash_num_tokens == 4
    assert pool.cached_block_hashes_by_block[2] == {k2}
    assert map_ids(pool, k4) == [2] and map_ids(pool, k2) == [2]
    assert pool.take_events() == []
    check(pool)


def test_move_block_hashes_puts_moved_entry_last_among_duplicates(check: Check) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(2)), 2)
    src, twin, dst = pool.get_new_blocks(3)
    pool.cache_full_blocks(req, [src], 0, 1, 2, 0)
    pool.cache_full_blocks(req, [twin], 0, 1, 2, 0)
    k = key(req.block_hashes[0])
    assert map_ids(pool, k) == [1, 2]
    pool.move_block_hashes(src, dst)
    assert map_ids(pool, k) == [2, 3]
    assert pool.get_cached_block(req.block_hashes[0], [0]) == [twin]
    check(pool)


def test_move_block_hashes_from_unkeyed_source_is_a_noop(check: Check) -> None:
    pool = pool_with()
    src, dst = pool.get_new_blocks(2)
    pool.move_block_hashes(src, dst)
    pool.move_block_hashes(pool.null_block, dst)
    assert src.block_hash is None and dst.block_hash is None
    check(pool)


# ----------------------------------------------------------- reset_prefix_cache


def test_reset_prefix_cache_refuses_while_a_block_is_held(snapshot: Callable[..., object]) -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(2)), 2)
    (a,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(req, [a], 0, 1, 2, 0)
    before = snapshot(pool)
    assert pool.reset_prefix_cache() is False
    assert snapshot(pool) == before


def test_reset_prefix_cache_clears_keys_fires_watchers_keeps_order(check: Check) -> None:
    pool = pool_with(6)
    req = Request.from_tokens("r", list(range(6)), 2)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(req, blocks, 0, 3, 2, 0)
    pool.cache_partial_block(req, blocks[2], 2, 0, 2)
    fired: list[int] = []
    pool.unpin_blocks(blocks[:1], lambda blk: fired.append(blk.block_id))
    pool.free_blocks(blocks[1:][::-1])
    order = [x.block_id for x in pool.free_block_queue.get_all_free_blocks()]
    pool.take_events()
    assert pool.reset_prefix_cache() is True
    assert fired == [1] and pool._reuse_watchers == {}
    assert len(pool.cached_block_hash_to_block) == 0
    assert pool.cached_block_hashes_by_block == {}
    assert all(b.block_hash is None for b in pool.blocks)
    assert [x.block_id for x in pool.free_block_queue.get_all_free_blocks()] == order
    assert pool.take_events() == [AllBlocksCleared()]
    check(pool)


# ---------------------------------------------------------------------- events


def test_events_off_records_nothing() -> None:
    pool = pool_with(events=False)
    req = Request.from_tokens("r", list(range(4)), 2)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, blocks, 0, 2, 2, 0)
    pool.evict_blocks([1])
    pool.free_blocks(blocks)
    pool.reset_prefix_cache()
    assert pool.kv_event_queue == [] and pool.take_events() == []


def test_take_events_returns_and_clears() -> None:
    pool = pool_with()
    pool.reset_prefix_cache()
    assert pool.take_events() == [AllBlocksCleared()]
    assert pool.take_events() == []


def test_event_hashes_carry_no_group_suffix() -> None:
    pool = pool_with()
    req = Request.from_tokens("r", list(range(2)), 2)
    (a,) = pool.get_new_blocks(1)
    pool.cache_full_blocks(req, [a], 0, 1, 2, 9)
    pool.evict_blocks([1])
    stored, removed = pool.take_events()
    assert isinstance(stored, BlockStored) and isinstance(removed, BlockRemoved)
    assert stored.block_hashes == removed.block_hashes == [req.block_hashes[0]]
    assert len(removed.block_hashes[0]) == 32 and removed.group_idx == 9


def test_blocks_keep_their_ids_across_reuse() -> None:
    pool = pool_with(4)
    first = pool.get_new_blocks(3)
    pool.free_blocks(first)
    again = pool.get_new_blocks(3)
    assert sorted(b.block_id for b in again) == [1, 2, 3]
    assert all(pool.blocks[b.block_id] is b for b in again)
    assert isinstance(again[0], KVCacheBlock)
