"""The free queue: a sentinel ring with O(1) operations."""

from __future__ import annotations

import pytest
from kvpool.impl import BlockPoolError, FreeKVCacheBlockQueue, KVCacheBlock


def make(n: int) -> tuple[list[KVCacheBlock], FreeKVCacheBlockQueue]:
    blocks = [KVCacheBlock(i) for i in range(n)]
    return blocks, FreeKVCacheBlockQueue(blocks)


def ids(q: FreeKVCacheBlockQueue) -> list[int]:
    return [b.block_id for b in q.get_all_free_blocks()]


def backward_ids(q: FreeKVCacheBlockQueue) -> list[int]:
    root = q._root
    out = []
    blk = root.prev_free_block
    while blk is not root:
        assert blk is not None
        out.append(blk.block_id)
        blk = blk.prev_free_block
    return out[::-1]


def assert_ring(q: FreeKVCacheBlockQueue, expected: list[int]) -> None:
    assert ids(q) == expected
    assert backward_ids(q) == expected
    assert q.num_free_blocks == len(expected) == len(q)


def test_new_queue_holds_blocks_in_given_order() -> None:
    _, q = make(5)
    assert_ring(q, [0, 1, 2, 3, 4])


def test_empty_queue_is_root_linked_to_itself() -> None:
    q = FreeKVCacheBlockQueue([])
    assert q._root.next_free_block is q._root
    assert q._root.prev_free_block is q._root
    assert_ring(q, [])


def test_popleft_takes_front_and_unlinks_it() -> None:
    _, q = make(3)
    blk = q.popleft()
    assert blk.block_id == 0
    assert blk.prev_free_block is None and blk.next_free_block is None
    assert_ring(q, [1, 2])


def test_popleft_on_empty_queue_is_refused() -> None:
    _, q = make(1)
    q.popleft()
    with pytest.raises(BlockPoolError) as err:
        q.popleft()
    assert err.value.rule == "queue-empty"
    assert_ring(q, [])


def test_popleft_n_takes_front_in_order() -> None:
    _, q = make(5)
    out = q.popleft_n(3)
    assert [b.block_id for b in out] == [0, 1, 2]
    assert all(b.prev_free_block is None and b.next_free_block is None for b in out)
    assert_ring(q, [3, 4])


def test_popleft_n_can_empty_the_queue_and_zero_is_noop() -> None:
    _, q = make(3)
    assert q.popleft_n(0) == []
    assert_ring(q, [0, 1, 2])
    assert [b.block_id for b in q.popleft_n(3)] == [0, 1, 2]
    assert_ring(q, [])


@pytest.mark.parametrize("n", [-1, 4])
def test_popleft_n_out_of_range_is_refused_unchanged(n: int) -> None:
    _, q = make(3)
    with pytest.raises(BlockPoolError) as err:
        q.popleft_n(n)
    assert err.value.rule == "queue-count"
    assert_ring(q, [0, 1, 2])


@pytest.mark.parametrize("victim", [0, 2, 4])
def test_remove_from_front_middle_back(victim: int) -> None:
    blocks, q = make(5)
    q.remove(blocks[victim])
    assert blocks[victim].prev_free_block is None and blocks[victim].next_free_block is None
    assert_ring(q, [i for i in range(5) if i != victim])


def test_remove_last_member_leaves_empty_ring() -> None:
    blocks, q = make(1)
    q.remove(blocks[0])
    assert_ring(q, [])


def test_remove_of_non_member_is_refused_and_links_intact() -> None:
    blocks, q = make(3)
    q.remove(blocks[1])
    with pytest.raises(BlockPoolError) as err:
        q.remove(blocks[1])
    assert err.value.rule == "queue-membership"
    assert err.value.block_id == 1
    assert_ring(q, [0, 2])


def test_remove_of_sentinel_is_refused() -> None:
    _, q = make(2)
    with pytest.raises(BlockPoolError):
        q.remove(q._root)
    assert_ring(q, [0, 1])


def test_append_puts_block_at_back() -> None:
    blocks, q = make(3)
    q.remove(blocks[0])
    q.append(blocks[0])
    assert_ring(q, [1, 2, 0])


def test_append_of_member_is_refused() -> None:
    blocks, q = make(3)
    with pytest.raises(BlockPoolError):
        q.append(blocks[1])
    assert_ring(q, [0, 1, 2])


def test_append_n_keeps_order_at_back() -> None:
    _blocks, q = make(5)
    out = q.popleft_n(3)
    q.append_n([out[2], out[0]])
    assert_ring(q, [3, 4, 2, 0])
    q.append_n([])
    assert_ring(q, [3, 4, 2, 0])


def test_prepend_n_puts_first_at_very_front_order_kept() -> None:
    _blocks, q = make(6)
    out = q.popleft_n(3)
    q.prepend_n([out[1], out[2], out[0]])
    assert_ring(q, [1, 2, 0, 3, 4, 5])


def test_prepend_n_into_empty_queue() -> None:
    _blocks, q = make(2)
    out = q.popleft_n(2)
    q.prepend_n(out[::-1])
    assert_ring(q, [1, 0])


def test_append_n_with_a_member_is_refused_unchanged() -> None:
    blocks, q = make(5)
    a, b = q.popleft_n(2)
    with pytest.raises(BlockPoolError) as err:
        q.append_n([a, blocks[3], b])
    assert err.value.block_id == 3
    assert_ring(q, [2, 3, 4])
    assert a.prev_free_block is None and a.next_free_block is None
    assert b.prev_free_block is None and b.next_free_block is None


def test_append_n_with_a_duplicate_is_refused_unchanged() -> None:
    _blocks, q = make(5)
    a, b = q.popleft_n(2)
    with pytest.raises(BlockPoolError):
        q.append_n([a, b, a])
    assert_ring(q, [2, 3, 4])
    assert all(x.prev_free_block is None and x.next_free_block is None for x in (a, b))
    q.append_n([a, b])
    assert_ring(q, [2, 3, 4, 0, 1])


def test_prepend_n_with_a_duplicate_is_refused_unchanged() -> None:
    _blocks, q = make(4)
    a, b = q.popleft_n(2)
    with pytest.raises(BlockPoolError):
        q.prepend_n([b, a, b])
    assert_ring(q, [2, 3])
    assert all(x.prev_free_block is None and x.next_free_block is None for x in (a, b))


def test_remove_is_constant_time_independent_of_position() -> None:
    # Removing from the middle touches only the block and its two neighbours.
    blocks, q = make(1001)
    mid = blocks[500]
    before, after = mid.prev_free_block, mid.next_free_block
    q.remove(mid)
    assert before is blocks[499] and after is blocks[501]
    assert blocks[499].next_free_block is blocks[501]
    assert blocks[501].prev_free_block is blocks[499]
    assert q.num_free_blocks == 1000


def _splice_out(block: KVCacheBlock) -> None:
    """What the pool's touch does in place: the two assignments of ``remove``."""
    before, after = block.prev_free_block, block.next_free_block
    assert before is not None and after is not None
    before.next_free_block = after
    after.prev_free_block = before


def test_finish_removals_completes_a_batch_spliced_out_in_place() -> None:
    blocks, q = make(6)
    batch = [blocks[3], blocks[0], blocks[4], blocks[5]]
    for b in batch:
        _splice_out(b)
    q.finish_removals(batch)
    assert_ring(q, [1, 2])
    assert all(b.prev_free_block is None and b.next_free_block is None for b in batch)
    q.finish_removals([])
    assert_ring(q, [1, 2])


@pytest.mark.parametrize("order", [[2, 3, 5], [5, 3, 2], [3, 2, 4, 1, 5], [0, 4]])
def test_undo_removals_puts_every_block_back_in_place(order: list[int]) -> None:
    blocks, q = make(6)
    batch = [blocks[i] for i in order]
    for b in batch:
        _splice_out(b)
    q.undo_removals(batch)
    assert_ring(q, [0, 1, 2, 3, 4, 5])
