"""Focused checks written against mutants of ``kvpool.impl`` that the rest of the suite let
survive (issue 7): the exact refusal a caller sees (operation, rule, block, message), the
slow-path checks that only an ``int`` subclass reaches, and the small accessors.

Each test's name says what it checks; where that is not enough, its docstring says what a
wrong version would get wrong."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

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
    LoRARequest,
    ManagedRequest,
    Request,
    encode,
    make_block_hash_with_group_id,
    request_block_hashes,
    sha256_hash,
)

E = TypeVar("E", bound=BaseException)


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


# ---------------------------------------------------------------- manager refusals


def _raised(error: type[E], call: Callable[..., object], *args: object) -> E:
    """The ``error`` that ``call(*args)`` raises (the test fails if it raises none)."""
    with pytest.raises(error) as info:
        call(*args)
    return info.value


def _running_manager() -> KVCacheManager:
    """A manager running ``r`` (2 blocks computed) with ``w`` waiting after a preemption."""
    m = KVCacheManager(12, 2)
    for rid in ("r", "w"):
        assert m.admit(rid, [1, 2, 3, 4]) is not None
        m.copies_done(rid)
        m.commit(rid)
    m.preempt("w")
    return m


@pytest.mark.parametrize(
    ("op", "args", "rule", "detail"),
    [
        ("admit", ("r", [1]), "request-new", "already known"),
        ("admit", ("n", []), "request-tokens", "tokens []"),
        ("admit", ("n", [1, -2]), "request-tokens", "tokens [1, -2]"),
        ("resume", ("r",), "request-preempted", "not waiting after a preemption"),
        ("resume", ("ghost",), "request-preempted", "not waiting after a preemption"),
        ("append", ("w", [5]), "request-running", "not running"),
        ("append", ("r", []), "request-tokens", "tokens []"),
        ("prepare_write", ("w",), "request-running", "not running"),
        ("commit", ("w",), "request-running", "not running"),
        ("preempt", ("w",), "request-running", "not running"),
        ("copies_done", ("ghost",), "request-known", "unknown"),
        ("finish", ("ghost",), "request-known", "unknown"),
    ],
)
def test_each_manager_refusal_names_operation_request_rule_and_detail(
    op: str, args: tuple[object, ...], rule: str, detail: str
) -> None:
    m = _running_manager()
    err = _raised(KVCacheManagerError, getattr(m, op), *args)
    rid = args[0]
    assert (err.operation, err.rule, err.request_id, err.detail) == (op, rule, rid, detail)
    assert str(err) == f"{op}: request {rid!r}: rule {rule!r}: {detail}"


def test_a_long_token_list_is_shown_cut_after_16() -> None:
    m = KVCacheManager(12, 2)
    err = _raised(KVCacheManagerError, m.admit, "n", [*range(20), -1])
    assert err.detail == f"tokens {[*range(16), '...']}"


def test_pending_copies_are_refused_by_name() -> None:
    """A request whose written tail is cached must have it copied before it grows again or
    commits: both are refused until ``copies_done``."""
    m = KVCacheManager(16, 4, hash_block_size=1)
    assert m.admit("cow", [7, 8, 9, 10, 11, 12]) is not None
    m.copies_done("cow")
    assert m.prepare_write("cow") is not None
    m.copies_done("cow")
    m.commit("cow", cache_partial=True)
    assert m.append("cow", [13]) is not None
    prepared = m.prepare_write("cow")
    assert prepared is not None and prepared.copies
    for op, args in (("append", ("cow", [9])), ("commit", ("cow",))):
        err = _raised(KVCacheManagerError, getattr(m, op), *args)
        assert (err.operation, err.rule) == (op, "copies-pending")
        assert str(err) == (
            f"{op}: request 'cow': rule 'copies-pending': copies were handed out; "
            "call copies_done first"
        )


def test_partial_caching_with_a_sliding_group_is_refused_by_name() -> None:
    groups = (KVCacheGroupSpec.full_attention(), KVCacheGroupSpec.sliding_window(1))
    m = KVCacheManager(12, 2, groups)
    assert m.admit("a", [1, 2, 3]) is not None
    m.copies_done("a")
    err = _raised(KVCacheManagerError, m.commit, "a", True)
    assert str(err) == (
        "commit: request 'a': rule 'partial-full-attention': a sliding-window group is configured"
    )


def test_a_preempted_request_is_not_running_as_a_bool() -> None:
    m = _running_manager()
    assert m.is_running("r") is True
    assert m.is_running("w") is False


def test_a_preempted_request_is_kept_as_a_fresh_one() -> None:
    """After ``preempt`` the manager's record of the request is that of a request never
    scheduled (tokens kept): no blocks, nothing computed, cached or nulled, no copies."""
    m = _running_manager()
    record = m.requests["w"]
    fresh = ManagedRequest(record.request, record.salt, m.num_groups)
    # block_keys: what the salt and adapter give, kept once asked
    kept = ("request", "salt", "extra_keys", "block_keys")
    fields = [f for f in ManagedRequest.__slots__ if f not in kept]
    assert {f: getattr(record, f) for f in fields} == {f: getattr(fresh, f) for f in fields}


@pytest.mark.parametrize(
    ("block_id", "message"),
    [
        (True, "a block id must be an int, got True"),
        ("3", "a block id must be an int, got '3'"),
        (2.0, "a block id must be an int, got 2.0"),
        (12, "block id 12 is not in [0, 12)"),
        (-1, "block id -1 is not in [0, 12)"),
    ],
)
def test_writability_of_a_bad_block_id_is_refused_with_the_value(
    block_id: object, message: str
) -> None:
    m = _running_manager()
    with pytest.raises(ValueError) as info:
        m.is_block_writable(block_id)  # type: ignore[arg-type]
    assert str(info.value) == message


# ----------------------------------------------------------------- construction


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((8, 0), "block_size must be a positive int, got 0"),
        ((8, True), "block_size must be a positive int, got True"),
        ((8, 2.0), "block_size must be a positive int, got 2.0"),
        ((8, 2, (), True, 1), "a manager needs at least one KV-cache group"),
        ((8, 2, ("full",)), "not a KVCacheGroupSpec: 'full'"),
        ((8, 2, (KVCacheGroupSpec(),), True, 0), "hash_block_size must be a positive int, got 0"),
        (
            (8, 2, (KVCacheGroupSpec(),), True, False),
            "hash_block_size must be a positive int, got False",
        ),
        (
            (8, 4, (KVCacheGroupSpec(),), True, 3),
            "block_size 4 is not a multiple of hash_block_size 3",
        ),
        (
            (8, 4, (KVCacheGroupSpec(),), True, 2.0),
            "hash_block_size must be a positive int, got 2.0",
        ),
    ],
)
def test_a_manager_built_wrong_is_refused_with_the_value(
    args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(ValueError) as info:
        KVCacheManager(*args)  # type: ignore[arg-type]
    assert str(info.value) == message


@pytest.mark.parametrize("blocks", [-1, True, 1.5])
def test_a_group_spec_with_a_bad_window_is_refused_with_the_value(blocks: object) -> None:
    with pytest.raises(ValueError) as info:
        KVCacheGroupSpec(blocks)  # type: ignore[arg-type]
    assert str(info.value) == f"sliding_window_blocks must be an int >= 0, got {blocks!r}"


def test_a_manager_keeps_what_it_was_built_with() -> None:
    groups = (KVCacheGroupSpec(), KVCacheGroupSpec.sliding_window(2))
    m = KVCacheManager(9, 4, groups, False, 2, enable_kv_cache_events=False)
    assert (m.block_size, m.hash_block_size, m.groups, m.enable_caching) == (4, 2, groups, False)
    assert m.num_groups == 2
    pool = m.block_pool
    assert (pool.num_gpu_blocks, pool.enable_caching, pool.hash_block_size) == (9, False, 2)
    assert pool.enable_kv_cache_events is False


# --------------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (None, b"N"),
        (True, b"T"),
        (False, b"F"),
        (0, b"I\x00\x00\x00\x010"),
        (-12, b"I\x00\x00\x00\x03-12"),
        (_Count(7), b"I\x00\x00\x00\x017"),
        ("", b"S\x00\x00\x00\x00"),
        ("é", b"S\x00\x00\x00\x02\xc3\xa9"),
        (b"xy", b"B\x00\x00\x00\x02xy"),
        ((), b"L\x00\x00\x00\x00"),
        ((1, "a"), b"L\x00\x00\x00\x02I\x00\x00\x00\x011S\x00\x00\x00\x01a"),
        ([None, [b""]], b"L\x00\x00\x00\x02NL\x00\x00\x00\x01B\x00\x00\x00\x00"),
    ],
)
def test_each_kind_of_value_has_its_canonical_bytes(value: object, encoded: bytes) -> None:
    assert encode(value) == encoded


@pytest.mark.parametrize("value", [1.5, {1: 2}, (1, {3})])
def test_a_value_that_cannot_be_hashed_is_refused_with_its_type(value: object) -> None:
    with pytest.raises(TypeError) as info:
        encode(value)
    kind = "set" if isinstance(value, tuple) else type(value).__name__
    assert str(info.value) == f"cannot encode a value of type {kind} for hashing"


# ------------------------------------------------------------------ pool refusals


def _caching_pool() -> tuple[BlockPool, list[KVCacheBlock], Request]:
    """A pool of 8 (hash blocks of 2) holding blocks 1-3; block 1 cached as the request's
    first block."""
    pool = BlockPool(8, True, 2)
    held = pool.get_new_blocks(3)
    request = Request.from_tokens("r", list(range(6)), 2)
    pool.cache_full_blocks(request, held, 0, 1, 2, 0)
    return pool, held, request


POOL_REFUSALS: list[tuple[str, Callable[[BlockPool, list[KVCacheBlock], Request], object], str]]
POOL_REFUSALS = [
    (
        "get_new_blocks: rule 'get-new-blocks-count': cannot get 6 blocks: 4 are free",
        lambda p, b, r: p.get_new_blocks(6),
        "get-new-blocks-count",
    ),
    (
        "cache_full_blocks: rule 'cache-range': need 0 <= num_cached_blocks (2) <= "
        "num_full_blocks (1) <= len(blocks) (3)",
        lambda p, b, r: p.cache_full_blocks(r, b, 2, 1, 2, 0),
        "cache-range",
    ),
    (
        "cache_full_blocks: rule 'cache-range': block_mask has 1 entries for 2 blocks",
        lambda p, b, r: p.cache_full_blocks(r, b, 1, 3, 2, 0, block_mask=[True]),
        "cache-range",
    ),
    (
        "cache_full_blocks: rule 'hashes-available': 3 hashes of 2 tokens do not cover "
        "2 blocks of 4",
        lambda p, b, r: p.cache_full_blocks(r, b, 0, 2, 4, 0),
        "hashes-available",
    ),
    (
        "cache_full_blocks: block 5: rule 'cache-held': only a held block can be cached",
        lambda p, b, r: p.cache_full_blocks(r, [b[0], p.blocks[5]], 1, 2, 2, 0),
        "cache-held",
    ),
    (
        "cache_full_blocks: block 2: rule 'cache-distinct': the block is listed twice",
        lambda p, b, r: p.cache_full_blocks(r, [b[0], b[1], b[1]], 1, 3, 2, 0),
        "cache-distinct",
    ),
    (
        "cache_full_blocks: block 1: rule 'cache-fresh': the block already has a key "
        "covering 2 tokens (only a partial entry may be promoted to 2)",
        lambda p, b, r: p.cache_full_blocks(r, b, 0, 1, 2, 0),
        "cache-fresh",
    ),
    (
        "cache_full_blocks: rule 'block-size-multiple': block_size must be a positive "
        "multiple of hash_block_size 2, got 3",
        lambda p, b, r: p.cache_full_blocks(r, b, 0, 1, 3, 0),
        "block-size-multiple",
    ),
    (
        "cache_partial_block: block 5: rule 'cache-held': only a held block can be cached",
        lambda p, b, r: p.cache_partial_block(r, p.blocks[5], 2, 0, 2),
        "cache-held",
    ),
    (
        "cache_partial_block: block 2: rule 'partial-tokens': num_tokens must be a positive "
        "multiple of 2, got 3",
        lambda p, b, r: p.cache_partial_block(r, b[1], 3, 0, 4),
        "partial-tokens",
    ),
    (
        "cache_partial_block: block 2: rule 'hashes-available': 8 tokens need 4 hashes, "
        "the request has 3",
        lambda p, b, r: p.cache_partial_block(r, b[1], 8, 0, 10),
        "hashes-available",
    ),
    (
        "move_block_hashes: block 0: rule 'move-null': the null block cannot hold keys",
        lambda p, b, r: p.move_block_hashes(b[0], p.null_block),
        "move-null",
    ),
    (
        "move_block_hashes: block 1: rule 'move-dst-unkeyed': the destination already has a key",
        lambda p, b, r: p.move_block_hashes(b[1], b[0]),
        "move-dst-unkeyed",
    ),
]


@pytest.mark.parametrize(
    ("message", "call", "rule"),
    POOL_REFUSALS,
    ids=[m.split(":")[0] + " " + r for m, _, r in POOL_REFUSALS],
)
def test_each_pool_refusal_reads_operation_block_rule_and_detail(
    message: str, call: Callable[[BlockPool, list[KVCacheBlock], Request], object], rule: str
) -> None:
    pool, held, request = _caching_pool()
    err = _raised(BlockPoolError, call, pool, held, request)
    assert err.rule == rule
    assert str(err) == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, True, 2), "num_gpu_blocks must be an int >= 1, got 0"),
        (("8", True, 2), "num_gpu_blocks must be an int >= 1, got '8'"),
        ((8, True, 0), "hash_block_size must be an int >= 1, got 0"),
        ((8, True, 2.0), "hash_block_size must be an int >= 1, got 2.0"),
    ],
)
def test_a_pool_built_wrong_is_refused_with_the_value(
    args: tuple[object, ...], message: str
) -> None:
    err = _raised(BlockPoolError, BlockPool, *args)
    assert str(err) == f"BlockPool: rule 'pool-config': {message}"


def test_commit_caches_a_partial_tail_only_when_asked() -> None:
    """By default ``commit`` registers full blocks only: a partly written tail stays
    writable and unkeyed."""
    m = KVCacheManager(12, 4, hash_block_size=1)
    for rid in ("plain", "asked"):
        assert m.admit(rid, [1, 2, 3, 4, 5, 6]) is not None
        m.copies_done(rid)
        done = m.commit(rid) if rid == "plain" else m.commit(rid, cache_partial=True)
        tail = done.block_ids[0][1]
        assert m.is_block_writable(tail) is (rid == "plain")
        assert (m.block_pool.blocks[tail].block_hash is None) is (rid == "plain")


def test_a_request_keeps_its_salt() -> None:
    m = KVCacheManager(12, 2)
    assert m.admit("a", [1, 2, 3], salt="tenant-7") is not None
    record = m.requests["a"]
    assert record.salt == "tenant-7"
    assert m._extra_keys(record, 0, 2) == m._extra_keys(record, 2, 4) == ("tenant-7",)


def test_a_partial_entry_past_a_missing_block_is_no_hit() -> None:
    """The partial entry looked for is the one right after the full hits: one further on
    (after an evicted block) would skip tokens nobody has."""
    m = KVCacheManager(12, 2, hash_block_size=1)
    assert m.admit("a", [1, 2, 3, 4, 5]) is not None
    m.copies_done("a")
    first, second, _ = m.commit("a", cache_partial=True).block_ids[0]
    m.finish("a")
    m.block_pool.evict_blocks([second])
    got = m.admit("b", [1, 2, 3, 4, 5, 6])
    assert got is not None
    assert got.num_computed_tokens == 2 and got.copies == ()
    assert got.block_ids[0][0] == first


def test_after_a_hit_only_sliding_tables_start_with_null_entries() -> None:
    """``num_nulled`` counts the null entries a table starts with: none for a full-attention
    group, the blocks before the window for a sliding one."""
    groups = (KVCacheGroupSpec.full_attention(), KVCacheGroupSpec.sliding_window(1))
    m = KVCacheManager(20, 2, groups)
    assert m.admit("a", [1, 2, 3, 4, 5, 6, 7]) is not None
    m.copies_done("a")
    m.commit("a")
    m.finish("a")
    got = m.admit("b", [1, 2, 3, 4, 5, 6, 7])
    assert got is not None and got.num_computed_tokens == 6
    record = m.requests["b"]
    assert record.num_nulled == [0, 2]
    assert 0 not in got.block_ids[0] and got.block_ids[1][:2] == (0, 0)


#: (block_size, group, rule, detail) that a cache call refuses, hash blocks of 2 tokens.
BAD_SIZE_OR_GROUP = [
    (4.0, 0, "block-size-multiple", "block_size must be a positive multiple of "
     "hash_block_size 2, got 4.0"),
    (0, 0, "block-size-multiple", "block_size must be a positive multiple of "
     "hash_block_size 2, got 0"),
    (_Count(4), -1, "group-id-range", "group id -1 does not fit in 4 unsigned bytes"),
    (4, 1 << 32, "group-id-range", "group id 4294967296 does not fit in 4 unsigned bytes"),
    (4, 1.0, "group-id-range", "group id 1.0 does not fit in 4 unsigned bytes"),
]  # fmt: skip


@pytest.mark.parametrize(("block_size", "group", "rule", "detail"), BAD_SIZE_OR_GROUP)
def test_a_partial_cache_call_with_a_bad_size_or_group_is_refused(
    block_size: object, group: object, rule: str, detail: str
) -> None:
    pool, held, request = _caching_pool()
    err = _raised(BlockPoolError, pool.cache_partial_block, request, held[1], 2, group, block_size)
    assert str(err) == f"cache_partial_block: rule {rule!r}: {detail}"
    assert held[1].block_hash is None


def test_partial_caching_in_a_pool_without_caching_is_refused_by_name() -> None:
    pool = BlockPool(4, False, 2)
    (block,) = pool.get_new_blocks(1)
    request = Request.from_tokens("r", [1, 2, 3, 4], 2)
    err = _raised(BlockPoolError, pool.cache_partial_block, request, block, 2, 0, 4)
    assert (
        str(err)
        == "cache_partial_block: rule 'caching-enabled': prefix caching is off in this pool"
    )


def test_a_move_to_another_pools_block_is_refused_by_name() -> None:
    pool, held, _ = _caching_pool()
    other = BlockPool(8, True, 2)
    (theirs,) = other.get_new_blocks(1)
    theirs_id = theirs.block_id
    err = _raised(BlockPoolError, pool.move_block_hashes, held[0], theirs)
    assert str(err) == (
        f"move_block_hashes: block {theirs_id}: rule 'foreign-block': "
        "the block belongs to another pool"
    )
    assert held[0].block_hash is not None and theirs.block_hash is None


@pytest.mark.parametrize("block_size", [0, -2, True, 2.0, "2"])
def test_hashing_at_a_bad_block_size_is_refused_with_the_value(block_size: object) -> None:
    with pytest.raises(ValueError) as info:
        request_block_hashes([1, 2, 3, 4], block_size)  # type: ignore[arg-type]
    assert str(info.value) == f"block_size must be a positive int, got {block_size!r}"


@pytest.mark.parametrize(("size", "cut"), [(16, False), (17, True)])
def test_a_token_list_is_shown_whole_up_to_16(size: int, cut: bool) -> None:
    tokens = [*range(size - 1), -1]
    err = _raised(KVCacheManagerError, KVCacheManager(12, 2).admit, "n", tokens)
    assert err.detail == f"tokens {[*tokens[:16], '...'] if cut else tokens}"


def test_a_commit_without_prepare_write_reports_no_copies() -> None:
    m = KVCacheManager(12, 2)
    assert m.admit("a", [1, 2, 3]) is not None
    m.copies_done("a")
    assert m.commit("a").copies == ()
    assert m.requests["a"].request.request_id == "a"


@pytest.mark.parametrize(
    ("block_size", "group", "rule", "detail"),
    [
        *BAD_SIZE_OR_GROUP,
        (6, 0, "block-size-multiple", "block_size must be a positive multiple of "
         "hash_block_size 4, got 6"),
    ],
)  # fmt: skip
def test_a_full_cache_call_with_a_bad_size_or_group_is_refused(
    block_size: object, group: object, rule: str, detail: str
) -> None:
    hbs = 4 if block_size == 6 else 2
    pool = BlockPool(8, True, hbs)
    held = pool.get_new_blocks(2)
    request = Request.from_tokens("r", list(range(8)), hbs)
    err = _raised(BlockPoolError, pool.cache_full_blocks, request, held, 0, 1, block_size, group)
    assert str(err) == f"cache_full_blocks: rule {rule!r}: {detail}"
    assert all(b.block_hash is None for b in held)


@pytest.mark.parametrize(
    ("groups", "shown"),
    [([1.0], "1.0"), ([0.0], "0.0"), ([-1], "-1"), ([0, 1 << 32], "4294967296"), ((2.0,), "2.0")],
)
def test_a_lookup_in_a_bad_group_is_refused_with_the_value(groups: object, shown: str) -> None:
    pool, _, request = _caching_pool()
    err = _raised(BlockPoolError, pool.get_cached_block, request.block_hashes[0], groups)
    assert str(err) == (
        "get_cached_block: rule 'group-id-range': "
        f"group id {shown} does not fit in 4 unsigned bytes"
    )


@pytest.mark.parametrize(
    ("make_groups", "count"),
    [
        (lambda: [_Count(0)], 1),
        (lambda: (0,), 1),
        (lambda: iter([0]), 1),  # made afresh each run: an iterator is read once
        (lambda: [0, 0], 2),
    ],
    ids=["int-subclass", "tuple", "iterator", "twice"],
)
def test_a_lookup_accepts_any_form_of_valid_groups(
    make_groups: Callable[[], object], count: int
) -> None:
    """One block per group listed, whatever holds the groups."""
    pool, held, request = _caching_pool()
    got = pool.get_cached_block(request.block_hashes[0], make_groups())  # type: ignore[arg-type]
    assert got == [held[0]] * count


def test_partial_caching_under_a_key_the_block_holds_as_an_extra_is_a_no_op() -> None:
    """A block keyed for 3 tokens also gets the 2-token key (an extra: the longer entry
    stays its primary); caching the 2-token key again finds it and does nothing, no event."""
    pool = BlockPool(8, True, 1, enable_kv_cache_events=True)
    request = Request.from_tokens("r", list(range(1, 9)), 1)
    (block,) = pool.get_new_blocks(1)
    pool.cache_partial_block(request, block, 3, 0, 4)
    pool.cache_partial_block(request, block, 2, 0, 4)
    assert block.block_hash_num_tokens == 3
    pool.take_events()
    pool.cache_partial_block(request, block, 2, 0, 4)
    assert pool.take_events() == []
    table = pool.cached_block_hash_to_block
    assert table.blocks_under(request.block_hashes[1], 0) == [block]
    assert table.blocks_under(request.block_hashes[2], 0) == [block]


def test_a_partial_entry_event_names_the_requests_lora_adapter() -> None:
    pool = BlockPool(8, True, 2, enable_kv_cache_events=True)
    request = Request.from_tokens(
        "r", [1, 2, 3, 4], 2, lora_request=LoRARequest(adapter_id=7, name="ad")
    )
    (block,) = pool.get_new_blocks(1)
    pool.cache_partial_block(request, block, 2, 0, 4)
    (event,) = pool.take_events()
    assert (event.lora_id, event.lora_name) == (7, "ad")


def test_discard_says_whether_the_block_was_there() -> None:
    """Every way a discard can go: no such group, no such hash, the block itself, another
    block, one of several (back to one), none of several."""
    table = BlockHashToBlockMap()
    a, b, c = KVCacheBlock(1), KVCacheBlock(2), KVCacheBlock(3)
    assert table.discard(b"h", 5, a) is False
    table.add(b"h", 0, a)
    assert table.discard(b"other", 0, a) is False
    assert table.discard(b"h", 0, b) is False
    assert table.discard(b"h", 0, a) is True
    assert table.blocks_under(b"h", 0) == []
    for block in (a, b):
        table.add(b"h", 0, block)
    assert table.discard(b"h", 0, c) is False
    assert table.discard(b"h", 0, a) is True
    assert table.blocks_under(b"h", 0) == [b]
    assert table.discard(b"h", 0, b) is True
    assert table.blocks_under(b"h", 0) == []


def test_a_manager_defaults_to_hash_blocks_of_one_token_with_events_on() -> None:
    pool = KVCacheManager(8, 2).block_pool
    assert pool.hash_block_size == 1
    assert pool.enable_kv_cache_events is True


def test_keys_of_one_block_in_two_groups_are_both_removed() -> None:
    """A block keyed in group 1 can also hold the same hash in group 0 (an extra key);
    reusing it removes both entries, each with its own event, and no other entry."""
    pool = BlockPool(8, True, 2, enable_kv_cache_events=True)
    request = Request.from_tokens("r", list(range(8)), 2)
    (block,) = pool.get_new_blocks(1)
    pool.cache_partial_block(request, block, 4, 1, 8)
    pool.cache_partial_block(request, block, 4, 0, 8)
    key = request.block_hashes[1]
    assert pool.get_cached_block(key, [1]) == [block] == pool.get_cached_block(key, [0])
    pool.take_events()
    pool.evict_blocks([block.block_id])
    assert pool.get_cached_block(key, [0]) is None and pool.get_cached_block(key, [1]) is None
    assert sorted(e.group_idx for e in pool.take_events()) == [0, 1]


def test_a_refused_touch_of_an_iterator_is_undone_and_named() -> None:
    """``touch`` takes any iterable: a one-shot iterator that stops on a bad block is
    refused by rule like a list, with the blocks taken before it put back."""
    pool, held, _ = _caching_pool()
    pool.free_blocks(held)
    before = _ids(pool.free_block_queue)
    err = _raised(BlockPoolError, pool.touch, iter([held[0], held[1]]))
    assert (err.operation, err.rule, err.block_id) == ("touch", "touch-identity", held[1].block_id)
    assert held[0].ref_cnt == 0 and _ids(pool.free_block_queue) == before


def test_a_refused_free_of_an_iterator_is_undone_and_named() -> None:
    pool, held, _ = _caching_pool()
    err = _raised(BlockPoolError, pool.free_blocks, iter([held[0], held[0]]))
    assert (err.operation, err.rule, err.block_id) == ("free_blocks", "free-held", held[0].block_id)
    assert held[0].ref_cnt == 1


def test_a_refused_touch_gives_back_only_the_holds_it_took() -> None:
    """Blocks after the one that stops the pass were never taken: their counts stay."""
    pool, held, _ = _caching_pool()
    first, later = held[0], held[2]
    pool.free_blocks([first])
    unkeyed_free = pool.blocks[5]
    err = _raised(BlockPoolError, pool.touch, [first, unkeyed_free, later])
    assert (err.rule, err.block_id) == ("touch-identity", 5)
    assert (first.ref_cnt, later.ref_cnt) == (0, 1)
    assert first.block_id in _ids(pool.free_block_queue)


def test_touch_re_raises_what_stopped_the_pass_when_no_rule_is_broken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the rule checks finding nothing, ``touch`` raises the exception that stopped its
    pass, or says it stopped for no rule; either way no hold is kept."""
    pool, held, _ = _caching_pool()
    monkeypatch.setattr(pool, "_check_touch", lambda blocks: None)
    with pytest.raises(AttributeError):
        pool.touch([held[1], object()])  # type: ignore[list-item]
    other = BlockPool(4, True, 2).get_new_blocks(1)[0]
    with pytest.raises(AssertionError) as info:
        pool.touch([held[1], other])
    assert str(info.value) == "touch stopped for no rule"
    assert held[1].ref_cnt == 1


def test_writability_of_another_pools_block_is_refused_by_name() -> None:
    pool, _, _ = _caching_pool()
    theirs = BlockPool(8, True, 2).get_new_blocks(1)[0]
    err = _raised(BlockPoolError, pool.is_block_writable, theirs)
    assert str(err) == (
        f"is_block_writable: block {theirs.block_id}: rule 'foreign-block': "
        "the block belongs to another pool"
    )


def test_a_refused_free_gives_back_only_the_holds_it_took() -> None:
    pool, held, _ = _caching_pool()
    gone = BlockPool(4, True, 2)
    (orphan,) = gone.get_new_blocks(1)
    del gone
    err = _raised(BlockPoolError, pool.free_blocks, [held[0], orphan, held[2]])
    assert (err.rule, err.block_id) == ("foreign-route", orphan.block_id)
    assert [b.ref_cnt for b in held] == [1, 1, 1]


@pytest.mark.parametrize("op", ["append_n", "prepend_n"])
@pytest.mark.parametrize("side", ["prev", "next", "both"])
def test_a_batch_with_a_linked_block_is_refused_by_name_and_undone(op: str, side: str) -> None:
    """A batch put in at either end refuses a block with any link set, naming the
    operation, block and rule, and leaves the queue as it was (the blocks chained before it
    unchained again)."""
    queue, blocks = _queue(3)
    fresh, stray = KVCacheBlock(5), KVCacheBlock(7)
    for name in ("prev", "next") if side == "both" else (side,):
        setattr(stray, f"{name}_free_block", blocks[2])
    with pytest.raises(BlockPoolError) as info:
        getattr(queue, op)([fresh, stray])
    err = info.value
    assert (err.operation, err.rule, err.block_id) == (op, "queue-membership", 7)
    assert str(err) == f"{op}: block 7: rule 'queue-membership': the block is already linked"
    assert _ids(queue) == [0, 1, 2] and queue.num_free_blocks == 3
    assert fresh.prev_free_block is None and fresh.next_free_block is None


def test_a_key_ends_with_its_group_as_4_big_endian_bytes() -> None:
    """Small groups come from a table of ready suffixes, the rest are computed; both give
    the same 4 bytes."""
    from kvpool.impl.block import _NUM_SUFFIXES

    for group in (0, 1, _NUM_SUFFIXES - 1, _NUM_SUFFIXES, _NUM_SUFFIXES + 5, (1 << 32) - 1):
        block = KVCacheBlock(1)
        block.set_key(b"h", group, 2)
        assert block.block_hash == b"h" + group.to_bytes(4, "big")


def test_free_re_raises_what_stopped_its_pass_when_no_rule_is_broken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the rule checks finding nothing, ``free_blocks`` raises the exception that
    stopped its pass (here a block whose count cannot be read), or says it stopped for no
    rule (a block released once too often, with the checks switched off)."""
    pool, held, _ = _caching_pool()
    monkeypatch.setattr(pool, "_validate_releases", lambda *args, **kwargs: None)
    unreadable = held[2]
    del unreadable.ref_cnt
    with pytest.raises(AttributeError):
        pool.free_blocks([unreadable])
    unreadable.ref_cnt = 1
    with pytest.raises(AssertionError) as info:
        pool.free_blocks([pool.blocks[6]])
    assert str(info.value) == "free_blocks stopped for no rule"
    assert pool.blocks[6].ref_cnt == 0


def test_an_int_subclass_count_of_new_blocks_is_accepted() -> None:
    pool = BlockPool(6, True, 2)
    got = pool.get_new_blocks(_Count(2))
    assert [b.block_id for b in got] == [1, 2]
    assert pool.get_num_free_blocks() == 3


@pytest.mark.parametrize(
    ("table", "mask"),
    [
        ("held, free", [True, True]),
        ("held, free", [False, True]),
        ("null, free", [True, True]),
    ],
)
def test_every_block_the_mask_keeps_is_checked_after_any_skipped_one(
    table: str, mask: list[bool]
) -> None:
    """Blocks the mask leaves out and null blocks are skipped, and the checks go on to the
    next block: a free block further on is still refused."""
    pool, held, request = _caching_pool()
    first = pool.null_block if table.startswith("null") else held[1]
    free = pool.blocks[6]
    err = _raised(
        BlockPoolError, pool.cache_full_blocks, request, [held[0], first, free], 1, 3, 2, 0, mask
    )
    assert (err.rule, err.block_id) == ("cache-held", 6)
    assert free.block_hash is None and held[1].block_hash is None


def test_a_block_the_mask_leaves_out_is_not_checked() -> None:
    pool, held, request = _caching_pool()
    free = pool.blocks[6]
    pool.cache_full_blocks(request, [held[0], free, held[2]], 1, 3, 2, 0, [False, True])
    assert free.block_hash is None and held[2].block_hash is not None


def test_a_block_listed_twice_is_named_at_its_second_listing() -> None:
    """With a block listed twice, the refusal names that block, found at its second listing
    (not the first block the checks meet); null blocks listed many times are no duplicates."""
    pool = BlockPool(8, True, 2)
    held = pool.get_new_blocks(3)
    request = Request.from_tokens("r", list(range(8)), 2)
    err = _raised(
        BlockPoolError,
        pool.cache_full_blocks,
        request,
        [held[0], held[1], held[2], held[2]],
        1,
        4,
        2,
        0,
    )
    assert (err.rule, err.block_id) == ("cache-distinct", held[2].block_id)
    null = pool.null_block
    pool.cache_full_blocks(request, [held[0], null, null, held[1]], 1, 4, 2, 0)
    assert held[1].block_hash is not None and held[0].block_hash is None


def test_full_caching_in_a_pool_without_caching_is_refused_by_name() -> None:
    pool = BlockPool(4, False, 2)
    (block,) = pool.get_new_blocks(1)
    request = Request.from_tokens("r", [1, 2], 2)
    err = _raised(BlockPoolError, pool.cache_full_blocks, request, [block], 0, 1, 2, 0)
    assert str(err) == (
        "cache_full_blocks: rule 'caching-enabled': prefix caching is off in this pool"
    )


def test_taking_more_blocks_than_the_queue_holds_is_refused_by_name() -> None:
    queue, _ = _queue(3)
    with pytest.raises(BlockPoolError) as info:
        queue.popleft_n(4)
    assert str(info.value) == (
        "popleft_n: rule 'queue-count': cannot take 4 blocks from a queue of 3"
    )
    assert _ids(queue) == [0, 1, 2]


def test_taking_from_an_empty_queue_is_refused_by_name() -> None:
    queue, _ = _queue(0)
    with pytest.raises(BlockPoolError) as info:
        queue.popleft()
    assert str(info.value) == "popleft: rule 'queue-empty': the free queue is empty"


def test_a_queue_built_empty_is_a_closed_ring() -> None:
    """An empty queue walks to nothing, and blocks put in later are walked in order."""
    queue, _ = _queue(0)
    assert _ids(queue) == []
    queue.append(KVCacheBlock(4))
    queue.prepend_n([KVCacheBlock(3)])
    assert _ids(queue) == [3, 4] and queue.num_free_blocks == 2
