"""Focused checks written against mutants of ``kvpool.impl`` that the rest of the suite let
survive (issue 7): the exact refusal a caller sees (operation, rule, block, message), the
slow-path checks that only an ``int`` subclass reaches, and the small accessors.

Each test names, in its docstring, what a wrong version would get wrong."""

from __future__ import annotations

import pytest
from kvpool.impl import (
    BlockHashToBlockMap,
    BlockPool,
    BlockPoolError,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    KVCacheGroupSpec,
    KVCacheManager,
    KVCacheManagerError,
    Request,
    make_block_hash_with_group_id,
    request_block_hashes,
    sha256_hash,
)


class _Count(int):
    """An ``int`` subclass: a valid size or group id that skips the pool's plain-int fast
    checks, so the full checks have to accept it."""


def _queue(n: int) -> tuple[FreeKVCacheBlockQueue, list[KVCacheBlock]]:
    blocks = [KVCacheBlock(i) for i in range(n)]
    return FreeKVCacheBlockQueue(blocks), blocks


def _ids(queue: FreeKVCacheBlockQueue) -> list[int]:
    return [b.block_id for b in queue.get_all_free_blocks()]


# ------------------------------------------------------------------ the error type


def test_error_message_without_a_block_names_no_block() -> None:
    """A pool-wide refusal reads ``op: rule '...': detail``, with no ``block`` part."""
    err = BlockPoolError("cache_full_blocks", "caching-enabled", "prefix caching is off")
    assert str(err) == "cache_full_blocks: rule 'caching-enabled': prefix caching is off"
    assert err.block_id is None


def test_error_message_names_block_zero() -> None:
    """Block id 0 is a block (falsy, but not absent): the message names it."""
    err = BlockPoolError("free_blocks", "free-held", "not held", 0)
    assert str(err) == "free_blocks: block 0: rule 'free-held': not held"


# ------------------------------------------------------------------- free queue


def test_append_of_a_member_is_refused_by_name() -> None:
    """``append`` of a block already in the queue names the operation, block and rule."""
    queue, blocks = _queue(3)
    with pytest.raises(BlockPoolError) as info:
        queue.append(blocks[1])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("append", "queue-membership", 1)
    assert str(err) == "append: block 1: rule 'queue-membership': the block is already linked"
    assert _ids(queue) == [0, 1, 2]
    assert queue.num_free_blocks == 3


@pytest.mark.parametrize("side", ["prev", "next"])
def test_append_refuses_a_block_with_one_link(side: str) -> None:
    """One link set is enough to be "linked": ``append`` refuses and the queue is intact."""
    queue, blocks = _queue(3)
    stray = KVCacheBlock(7)
    setattr(stray, f"{side}_free_block", blocks[2])
    with pytest.raises(BlockPoolError) as info:
        queue.append(stray)
    assert (info.value.rule, info.value.block_id) == ("queue-membership", 7)
    assert _ids(queue) == [0, 1, 2]
    assert blocks[2].next_free_block is not stray


def test_remove_of_a_non_member_is_refused_by_name() -> None:
    """``remove`` of a block outside the queue names the operation, block and rule."""
    queue, blocks = _queue(3)
    queue.remove(blocks[1])
    with pytest.raises(BlockPoolError) as info:
        queue.remove(blocks[1])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("remove", "queue-membership", 1)
    assert str(err) == (
        "remove: block 1: rule 'queue-membership': the block is not in the free queue"
    )
    assert _ids(queue) == [0, 2]


@pytest.mark.parametrize("side", ["prev", "next"])
def test_remove_refuses_a_block_with_one_link(side: str) -> None:
    """A block with a single link is not a member: refused, nothing relinked."""
    queue, blocks = _queue(3)
    stray = KVCacheBlock(7)
    setattr(stray, f"{side}_free_block", blocks[1])
    with pytest.raises(BlockPoolError) as info:
        queue.remove(stray)
    assert (info.value.rule, info.value.block_id) == ("queue-membership", 7)
    assert _ids(queue) == [0, 1, 2]
    assert queue.num_free_blocks == 3


@pytest.mark.skipif(not __debug__, reason="the check is an assert; python -O removes it")
def test_undo_removals_stops_before_relinking_a_half_linked_block() -> None:
    """``undo_removals`` checks both links before writing either: a block missing one is
    rejected with its neighbour left untouched."""
    queue, blocks = _queue(3)
    stray = KVCacheBlock(7)
    stray.prev_free_block = blocks[0]
    with pytest.raises(AssertionError):
        FreeKVCacheBlockQueue.undo_removals([stray])
    assert blocks[0].next_free_block is blocks[1]
    assert _ids(queue) == [0, 1, 2]


# --------------------------------------------------------------------------- touch


def test_touch_of_a_free_block_without_a_key_names_block_and_rule() -> None:
    pool = BlockPool(6, True, 2)
    with pytest.raises(BlockPoolError) as info:
        pool.touch([pool.blocks[3]])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("touch", "touch-identity", 3)
    assert str(err) == (
        "touch: block 3: rule 'touch-identity': a free block without a key is not a cache hit"
    )
    assert pool.blocks[3].ref_cnt == 0


def test_touch_of_another_pools_block_names_touch() -> None:
    mine, other = BlockPool(6, True, 2), BlockPool(6, True, 2)
    (foreign,) = other.get_new_blocks(1)
    with pytest.raises(BlockPoolError) as info:
        mine.touch([foreign])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("touch", "foreign-block", foreign.block_id)
    assert str(err).startswith(f"touch: block {foreign.block_id}: rule 'foreign-block':")


# ---------------------------------------------------- block size and group checks


def _cache_two(pool: BlockPool, block_size: int, group: int) -> tuple[Request, list[KVCacheBlock]]:
    hbs = pool.hash_block_size
    req = Request.from_tokens("r", list(range(2 * block_size)), hbs)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(req, blocks, 0, 2, block_size, group)
    return req, blocks


def test_int_subclass_block_size_is_accepted_and_scaled() -> None:
    """block_size 4 over hash blocks of 2: block j is keyed by fine hash 2j + 1."""
    pool = BlockPool(6, True, 2)
    req, blocks = _cache_two(pool, _Count(4), 0)
    assert pool.get_cached_block(req.block_hashes[1], [0]) == [blocks[0]]
    assert pool.get_cached_block(req.block_hashes[3], [0]) == [blocks[1]]
    assert pool.get_cached_block(req.block_hashes[0], [0]) is None


def test_int_subclass_block_size_of_one_is_accepted() -> None:
    pool = BlockPool(6, True, 1)
    req, blocks = _cache_two(pool, _Count(1), 0)
    assert pool.get_cached_block(req.block_hashes[0], [0]) == [blocks[0]]
    (extra,) = pool.get_new_blocks(1)
    pool.cache_partial_block(req, extra, 1, 0, _Count(1))
    assert pool.get_cached_block(req.block_hashes[0], [0]) == [blocks[0]]


@pytest.mark.parametrize("block_size", ["4", 3, 0])
def test_bad_block_size_is_refused_with_the_rule_and_value(block_size: object) -> None:
    pool = BlockPool(6, True, 2)
    req = Request.from_tokens("r", list(range(8)), 2)
    blocks = pool.get_new_blocks(2)
    with pytest.raises(BlockPoolError) as info:
        pool.cache_full_blocks(req, blocks, 0, 2, block_size, 0)  # type: ignore[arg-type]
    err = info.value
    assert (err.operation, err.rule) == ("cache_full_blocks", "block-size-multiple")
    assert str(err) == (
        "cache_full_blocks: rule 'block-size-multiple': block_size must be a positive "
        f"multiple of hash_block_size 2, got {block_size!r}"
    )


@pytest.mark.parametrize("group", [0, 1])
def test_int_subclass_group_id_is_accepted(group: int) -> None:
    pool = BlockPool(6, True, 2)
    req, blocks = _cache_two(pool, 2, _Count(group))
    assert pool.get_cached_block(req.block_hashes[0], [group]) == [blocks[0]]
    assert pool.get_cached_block(req.block_hashes[0], [_Count(group)]) == [blocks[0]]


@pytest.mark.parametrize("group", [True, "0", -1, 2**32])
def test_bad_group_id_is_refused_with_the_rule_and_value(group: object) -> None:
    pool = BlockPool(6, True, 2)
    with pytest.raises(BlockPoolError) as info:
        pool.get_cached_block(b"h" * 32, [group])  # type: ignore[list-item]
    err = info.value
    assert (err.operation, err.rule) == ("get_cached_block", "group-id-range")
    assert str(err) == (
        f"get_cached_block: rule 'group-id-range': group id {group!r} does not fit in 4 "
        "unsigned bytes"
    )


# ------------------------------------------------------------------- keys and map


def test_group_id_type_errors_name_the_type() -> None:
    with pytest.raises(TypeError, match=r"^a group id must be an int, not str$"):
        make_block_hash_with_group_id(b"h", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^a group id must be an int, not bool$"):
        make_block_hash_with_group_id(b"h", True)


def test_group_id_range_error_names_the_value() -> None:
    with pytest.raises(ValueError, match=r"^group id 4294967296 does not fit in 4 unsigned bytes$"):
        make_block_hash_with_group_id(b"h", 2**32)


def test_map_membership_of_odd_keys() -> None:
    """Non-bytes and too-short keys are simply absent; a 4-byte key (empty hash) is a key."""
    table = BlockHashToBlockMap()
    key = make_block_hash_with_group_id(b"", 0)
    assert len(key) == 4
    assert key not in table
    table.insert(key, KVCacheBlock(1))
    assert key in table
    assert 5 not in table
    assert None not in table
    assert b"\x00\x00\x00" not in table


# ------------------------------------------------------------------------ requests


def test_request_from_tokens_keeps_id_extra_keys_and_hash_function() -> None:
    def tagged(value: object) -> bytes:
        return b"tag" + sha256_hash(value)

    tokens = list(range(6))
    req = Request.from_tokens("r7", tokens, 2, extra_keys=("salt",), hash_function=tagged)
    assert req.request_id == "r7"
    assert req.all_token_ids == tokens
    assert req.block_hashes == request_block_hashes(tokens, 2, ("salt",), tagged)
    assert req.block_hashes != request_block_hashes(tokens, 2, None, tagged)
    assert all(h.startswith(b"tag") for h in req.block_hashes)


# ------------------------------------------------------------------------- manager


@pytest.mark.parametrize("accessor", ["is_running", "get_num_computed_tokens", "get_block_ids"])
def test_unknown_request_is_refused_by_the_accessor_named(accessor: str) -> None:
    manager = KVCacheManager(8, 2)
    with pytest.raises(KVCacheManagerError) as info:
        getattr(manager, accessor)("ghost")
    err = info.value
    assert (err.operation, err.rule, err.request_id, err.detail) == (
        accessor,
        "request-known",
        "ghost",
        "unknown",
    )
    assert str(err) == f"{accessor}: request 'ghost': rule 'request-known': unknown"


@pytest.mark.parametrize("blocks", [1, 3])
def test_sliding_window_keeps_its_size(blocks: int) -> None:
    spec = KVCacheGroupSpec.sliding_window(blocks)
    assert spec.sliding_window_blocks == blocks
    assert spec.is_sliding


@pytest.mark.parametrize("blocks", [0, -2, True, "2"])
def test_sliding_window_refuses_a_bad_size(blocks: object) -> None:
    with pytest.raises(ValueError) as info:
        KVCacheGroupSpec.sliding_window(blocks)  # type: ignore[arg-type]
    assert str(info.value) == f"a sliding window needs at least one block, got {blocks!r}"


# ----------------------------------------------------------- routing a free_blocks


def test_free_of_a_block_with_no_owner_names_block_and_rule() -> None:
    mine = BlockPool(4, True, 2)
    stray = KVCacheBlock(1)
    stray.ref_cnt = 1
    with pytest.raises(BlockPoolError) as info:
        mine.free_blocks([stray])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("free_blocks", "foreign-route", 1)
    assert str(err) == (
        "free_blocks: block 1: rule 'foreign-route': the block is not this pool's and has no "
        "live owner"
    )


@pytest.mark.parametrize("offset", [0, 1])
def test_free_of_an_impostor_of_a_live_pool_is_refused(offset: int) -> None:
    """A block that claims another live pool but is not that pool's block (same id, or an
    id just past its end) is not routed there: refused, and the owner is untouched."""
    mine, other = BlockPool(4, True, 2), BlockPool(4, True, 2)
    (real,) = other.get_new_blocks(1)
    bid = real.block_id if offset == 0 else other.num_gpu_blocks
    impostor = KVCacheBlock(bid, real.pool)
    impostor.ref_cnt = 1
    with pytest.raises(BlockPoolError) as info:
        mine.free_blocks([impostor])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("free_blocks", "foreign-route", bid)
    assert str(err) == (
        f"free_blocks: block {bid}: rule 'foreign-route': the block's pool does not own it"
    )
    assert real.ref_cnt == 1
    assert other.free_block_queue.num_free_blocks == 2


# ------------------------------------------------------------------ what a block shows


def test_a_blocks_repr_names_its_id_count_key_links_and_null() -> None:
    """A debugging aid that lies is worse than none: every field of the repr is checked (a
    wrong link, a missing null mark, a key shown in full or not at all)."""
    pool = BlockPool(4, enable_caching=True, hash_block_size=1)
    null, first = pool.blocks[0], pool.blocks[1]
    assert repr(null) == "KVCacheBlock(id=0, ref_cnt=0, key=none, prev=None, next=None, null)"
    assert repr(first) == "KVCacheBlock(id=1, ref_cnt=0, key=none, prev=-1, next=2)"
    assert repr(pool.blocks[3]) == "KVCacheBlock(id=3, ref_cnt=0, key=none, prev=2, next=-1)"
    assert first.prev_free_block is not None
    assert repr(first.prev_free_block) == "KVCacheBlock(sentinel)"
    (held,) = pool.get_new_blocks(1)
    held.set_block_hash(bytes(range(1, 9)) + bytes([0, 0, 0, 2]), 5)
    assert repr(held) == (
        f"KVCacheBlock(id={held.block_id}, ref_cnt=1, key=010203040506, prev=None, next=None)"
    )


def test_set_block_hash_splits_the_key_into_hash_and_group() -> None:
    """``set_block_hash`` takes a key as vLLM builds it (hash + 4-byte group id): the block
    must show that very key, its group and the tokens it covers."""
    block = KVCacheBlock(5)
    key = make_block_hash_with_group_id(b"\x07" * 8, 3)
    block.set_block_hash(key, 6)
    assert block.block_hash == key
    assert block.block_hash_num_tokens == 6
    block.reset_hash()
    assert block.block_hash is None and block.block_hash_num_tokens is None


def test_a_full_attention_group_spec_has_no_window() -> None:
    """``full_attention()`` is the group every table only appends to: no sliding window."""
    spec = KVCacheGroupSpec.full_attention()
    assert spec == KVCacheGroupSpec(0)
    assert spec.sliding_window_blocks == 0 and not spec.is_sliding
    assert KVCacheGroupSpec.sliding_window(2).is_sliding


# ------------------------------------------------------------------- sliding windows


def test_a_group_with_nothing_to_slide_does_not_stop_the_next_group() -> None:
    """With a wide window first and a narrow one second, only the second group has blocks
    that left its window; a manager that stopped at the first group with nothing to drop
    would keep them."""
    wide, narrow = KVCacheGroupSpec.sliding_window(4), KVCacheGroupSpec.sliding_window(1)
    m = KVCacheManager(14, 2, (wide, narrow), enable_caching=True, hash_block_size=1)
    assert m.admit("a", list(range(6))) is not None
    m.copies_done("a")
    prepared = m.prepare_write("a")
    assert prepared is not None
    m.copies_done("a")
    done = m.commit("a", False)
    assert done.block_ids == ((1, 2, 3), (0, 0, 6))
    assert [m.block_pool.blocks[b].ref_cnt for b in (4, 5)] == [0, 0]


# ------------------------------------------------------- free_blocks' careful path


def test_a_mixed_free_with_evict_first_sends_this_pools_keyed_blocks_to_the_front() -> None:
    """A call mixing this pool's blocks with another's takes the careful path; ``evict_first``
    must reach this pool's own release too, not only the routed one."""
    mine, other = BlockPool(4, True, 2), BlockPool(4, True, 2)
    (a,) = mine.get_new_blocks(1)
    mine.cache_full_blocks(Request.from_tokens("r", [1, 2], 2), [a], 0, 1, 2, 0)
    (x,) = other.get_new_blocks(1)
    mine.free_blocks([a, x], evict_first=True)
    assert _ids(mine.free_block_queue)[0] == a.block_id
    assert a.block_hash is not None
    assert x.ref_cnt == 0


def test_the_careful_path_re_raises_what_stopped_the_pass() -> None:
    """When the checks find nothing wrong and no block is another pool's, the pass stopped on
    an exception: that very exception is raised, and no block is released."""
    pool = BlockPool(4, True, 2)
    held = pool.get_new_blocks(2)
    stop = ValueError("a malformed block")
    with pytest.raises(ValueError) as info:
        pool._free_blocks_checked(held, False, stop)
    assert info.value is stop
    assert [b.ref_cnt for b in held] == [1, 1]


def test_the_careful_path_without_a_cause_is_an_internal_error() -> None:
    """With no exception and nothing refused there is no reason the pass stopped: an
    ``AssertionError`` that says so, never a silent release."""
    pool = BlockPool(4, True, 2)
    held = pool.get_new_blocks(1)
    with pytest.raises(AssertionError) as info:
        pool._free_blocks_checked(held, False, None)
    assert str(info.value) == "free_blocks stopped for no rule"
    assert held[0].ref_cnt == 1


# ------------------------------------------------------------------ unpin_blocks


def test_unpin_of_the_null_block_is_refused_by_name() -> None:
    pool = BlockPool(4, True, 2)
    with pytest.raises(BlockPoolError) as info:
        pool.unpin_blocks([pool.null_block], lambda block: None)
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("unpin_blocks", "null-unpin", 0)
    assert str(err) == "unpin_blocks: block 0: rule 'null-unpin': the null block cannot be unpinned"


def test_unpin_of_a_free_block_is_refused_by_name() -> None:
    pool = BlockPool(4, True, 2)
    with pytest.raises(BlockPoolError) as info:
        pool.unpin_blocks([pool.blocks[2]], lambda block: None)
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("unpin_blocks", "unpin-held", 2)
    assert str(err) == (
        "unpin_blocks: block 2: rule 'unpin-held': "
        "block 2 is released 1 times in this call but held 0 time(s)"
    )


# -------------------------------------------------------------- block id checks


@pytest.mark.parametrize(("bid", "shown"), [(4, 4), (-1, -1), ("x", None)])
def test_evict_of_an_id_out_of_range_names_the_id(bid: object, shown: int | None) -> None:
    """An int id out of range is named as the block; anything else is shown in the detail
    only (it is no block id)."""
    pool = BlockPool(4, True, 2)
    with pytest.raises(BlockPoolError) as info:
        pool.evict_blocks([bid])  # type: ignore[list-item]
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("evict_blocks", "block-id-range", shown)
    where = "" if shown is None else f"block {shown}: "
    assert str(err) == (
        f"evict_blocks: {where}rule 'block-id-range': block id {bid!r} is not in [0, 4)"
    )


@pytest.mark.parametrize(("bid", "shown"), [(4, 4), (5, 5), ("x", None)])
def test_a_block_whose_id_is_past_this_pool_is_refused_by_range(
    bid: object, shown: int | None
) -> None:
    """Another pool's block with an id this pool does not have (the id just past the end
    included) breaks the id range, not the ownership rule."""
    mine, other = BlockPool(4, True, 2), BlockPool(8, True, 2)
    stranger = KVCacheBlock(bid, other.blocks[1].pool)  # type: ignore[arg-type]
    with pytest.raises(BlockPoolError) as info:
        mine.move_block_hashes(stranger, mine.blocks[2])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("move_block_hashes", "block-id-range", shown)
    where = "" if shown is None else f"block {shown}: "
    assert str(err) == (
        f"move_block_hashes: {where}rule 'block-id-range': block id {bid!r} is not in [0, 4)"
    )


def test_another_pools_block_in_range_is_refused_as_foreign_by_name() -> None:
    mine, other = BlockPool(4, True, 2), BlockPool(4, True, 2)
    with pytest.raises(BlockPoolError) as info:
        mine.move_block_hashes(other.blocks[2], mine.blocks[2])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == ("move_block_hashes", "foreign-block", 2)
    assert str(err) == (
        "move_block_hashes: block 2: rule 'foreign-block': the block belongs to another pool"
    )
