"""The prefix-cache multimap."""

from __future__ import annotations

from kvpool.impl import BlockHashToBlockMap, KVCacheBlock


def test_lookup_of_missing_key_is_none() -> None:
    m = BlockHashToBlockMap()
    assert m.get_one_block(b"k") is None
    assert not m.contain(b"k", 1)
    assert m.pop(b"k", 1) is None
    assert len(m) == 0


def test_duplicate_key_lookup_returns_earliest() -> None:
    m = BlockHashToBlockMap()
    a, b, c = KVCacheBlock(1), KVCacheBlock(2), KVCacheBlock(3)
    m.insert(b"k", b)
    m.insert(b"k", a)
    m.insert(b"k", c)
    assert m.get_one_block(b"k") is b
    assert [x.block_id for x in m.get_all_blocks(b"k")] == [2, 1, 3]
    assert len(m) == 1


def test_pop_earliest_promotes_next_inserted() -> None:
    m = BlockHashToBlockMap()
    a, b, c = KVCacheBlock(1), KVCacheBlock(2), KVCacheBlock(3)
    for blk in (a, b, c):
        m.insert(b"k", blk)
    assert m.pop(b"k", 1) is a
    assert m.get_one_block(b"k") is b
    assert m.pop(b"k", 2) is b
    assert m.get_one_block(b"k") is c
    assert m.pop(b"k", 3) is c
    assert m.get_one_block(b"k") is None
    assert len(m) == 0


def test_reinserted_block_goes_last() -> None:
    m = BlockHashToBlockMap()
    a, b = KVCacheBlock(1), KVCacheBlock(2)
    m.insert(b"k", a)
    m.insert(b"k", b)
    m.pop(b"k", 1)
    m.insert(b"k", a)
    assert [x.block_id for x in m.get_all_blocks(b"k")] == [2, 1]


def test_pop_of_other_block_under_key_is_none_and_keeps_entry() -> None:
    m = BlockHashToBlockMap()
    a = KVCacheBlock(1)
    m.insert(b"k", a)
    assert m.pop(b"k", 9) is None
    assert m.get_one_block(b"k") is a


def test_contain_checks_the_pair() -> None:
    m = BlockHashToBlockMap()
    a, b = KVCacheBlock(1), KVCacheBlock(2)
    m.insert(b"k", a)
    assert m.contain(b"k", 1) and not m.contain(b"k", 2)
    m.insert(b"k", b)
    assert m.contain(b"k", 1) and m.contain(b"k", 2)


def test_inserting_a_present_pair_keeps_its_place() -> None:
    m = BlockHashToBlockMap()
    a, b = KVCacheBlock(1), KVCacheBlock(2)
    m.insert(b"k", a)
    m.insert(b"k", a)
    assert m.get_all_blocks(b"k") == [a]
    m.insert(b"k", b)
    m.insert(b"k", a)
    assert m.get_all_blocks(b"k") == [a, b]


def test_items_and_len_count_keys() -> None:
    m = BlockHashToBlockMap()
    a, b = KVCacheBlock(1), KVCacheBlock(2)
    x, y = b"x" * 32 + bytes(4), b"y" * 32 + (1).to_bytes(4, "big")
    m.insert(x, a)
    m.insert(y, a)
    m.insert(y, b)
    assert len(m) == 2
    assert dict(m.items()) == {x: [a], y: [a, b]}
    assert x in m and set(m) == {x, y}
    assert b"x" * 32 + (1).to_bytes(4, "big") not in m and b"k" not in m
    m.clear()
    assert len(m) == 0


def test_a_key_is_its_hash_and_group() -> None:
    m = BlockHashToBlockMap()
    a, b = KVCacheBlock(1), KVCacheBlock(2)
    h = bytes(range(32))
    m.add(h, 0, a)
    m.add(h, 7, b)
    # The whole-key view and the by-parts view are one map.
    assert m.get_one_block(h + bytes(4)) is a and m.get_one_block(h + (7).to_bytes(4, "big")) is b
    assert m.first(bytes(bytearray(h)), 0) is a  # an equal hash object, not the same one
    assert m.first(h, 1) is None and not m.holds(h, 1, 1)
    assert m.holds(h, 7, 2) and not m.holds(h, 7, 1)
    assert m.discard(h, 7, a) is False and m.discard(h, 7, b) is True
    assert m.blocks_under(h, 7) == [] and m.blocks_under(h, 0) == [a]
    assert len(m) == 1
