"""The KV cache manager over the impl's pool: scheduling, the copy protocol, registration,
sliding windows, release order, refusals, and lockstep agreement with the reference model
(``kvpool.spec.manager``, imported here only: the impl never sees the spec)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from kvpool.impl import (
    FULL_ATTENTION,
    BlockPool,
    KVCacheBlock,
    KVCacheGroupSpec,
    KVCacheManager,
    KVCacheManagerError,
    ManagedRequest,
    Scheduled,
    make_block_hash_with_group_id,
    sha256_hash,
)
from kvpool.spec import PoolConfig
from kvpool.spec import hashing as spec_hashing
from kvpool.spec.errors import ContractViolation
from kvpool.spec.manager import (
    Admit,
    Append,
    Compute,
    Finish,
    KVGroup,
    ManagerConfig,
    Preempt,
    RequestAction,
    ResetCache,
    Resume,
    initial_manager_state,
    manager_step,
)
from kvpool.spec.manager import Scheduled as SpecScheduled
from kvpool.spec.state import initial_state

Snapshot = Callable[[BlockPool], dict[str, Any]]
Check = Callable[[BlockPool], None]

SLIDING_1 = KVCacheGroupSpec.sliding_window(1)
SLIDING_2 = KVCacheGroupSpec.sliding_window(2)


def manager(
    n: int = 10,
    bs: int = 2,
    groups: Sequence[KVCacheGroupSpec] = (FULL_ATTENTION,),
    hbs: int = 1,
    caching: bool = True,
) -> KVCacheManager:
    return KVCacheManager(n, bs, groups, enable_caching=caching, hash_block_size=hbs)


def free_queue(m: KVCacheManager) -> list[int]:
    return [b.block_id for b in m.block_pool.free_block_queue.get_all_free_blocks()]


def ref(m: KVCacheManager, block_id: int) -> int:
    return m.block_pool.blocks[block_id].ref_cnt


def keyed(m: KVCacheManager, block_id: int) -> bool:
    return m.block_pool.blocks[block_id].block_hash is not None


def run(m: KVCacheManager, rid: str, tokens: Sequence[int], salt: str | None = None) -> Scheduled:
    """Admit (copies done) and compute a request; the final schedule."""
    admitted = m.admit(rid, tokens, salt)
    assert admitted is not None
    m.copies_done(rid)
    return compute(m, rid)


def compute(m: KVCacheManager, rid: str, cache_partial: bool = False) -> Scheduled:
    prepared = m.prepare_write(rid)
    assert prepared is not None
    m.copies_done(rid)
    return m.commit(rid, cache_partial)


def hashes_of(tokens: Sequence[int], hbs: int, salt: str | None = None) -> list[bytes]:
    extra_keys = None if salt is None else (salt,)
    return list(spec_hashing.request_block_hashes(list(tokens), hbs, extra_keys))


# ------------------------------------------------------------------ construction


def test_constructor_builds_its_own_pool_with_the_given_settings() -> None:
    m = KVCacheManager(7, 4, (FULL_ATTENTION, SLIDING_2), False, 2, enable_kv_cache_events=False)
    pool = m.block_pool
    assert isinstance(pool, BlockPool)
    assert (pool.num_gpu_blocks, pool.enable_caching, pool.hash_block_size) == (7, False, 2)
    assert pool.enable_kv_cache_events is False
    assert m.null_block is pool.null_block and m.null_block.block_id == 0
    assert m.has_sliding_window and not m.supports_partial_caching


@pytest.mark.parametrize(("bs", "hbs"), [(3, 2), (0, 1), (-2, 1), (1, 2)])
def test_block_size_must_be_a_positive_multiple_of_hash_block_size(bs: int, hbs: int) -> None:
    with pytest.raises(ValueError, match="block_size"):
        KVCacheManager(8, bs, hash_block_size=hbs)


def test_group_specs_are_full_attention_or_a_positive_window() -> None:
    assert not FULL_ATTENTION.is_sliding and SLIDING_2.is_sliding
    with pytest.raises(ValueError):
        KVCacheGroupSpec(-1)
    with pytest.raises(ValueError):
        KVCacheGroupSpec.sliding_window(0)
    with pytest.raises(ValueError, match="at least one"):
        KVCacheManager(8, 2, groups=())


def test_impl_never_imports_the_spec() -> None:
    code = (
        "import sys, kvpool.impl, kvpool.impl.kv_cache_manager;"
        "bad = [m for m in sys.modules if m.startswith(('kvpool.spec', 'kvpool.conformance'))];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ hashing


@pytest.mark.parametrize("salt", [None, "s", ""])
@pytest.mark.parametrize("hbs", [1, 2, 3])
def test_block_hashes_equal_the_spec_hashes_salt_included(hbs: int, salt: str | None) -> None:
    m = manager(n=20, bs=hbs * 2, hbs=hbs)
    tokens = list(range(20, 31))
    assert m.admit("a", tokens, salt) is not None
    assert m.requests["a"].request.block_hashes == list(hashes_of(tokens, hbs, salt))


@pytest.mark.parametrize("hbs", [1, 2])
def test_hashes_with_lora_images_and_embeddings_equal_the_spec_hashes(hbs: int) -> None:
    from kvpool.spec.manager import ALL_ATTRIBUTES, ExtraKeys, LoraAdapter, MultiModalFeature
    from kvpool.spec.manager.extra_keys import partitioned_block_hashes

    tokens = list(range(20, 31))
    extra = ExtraKeys(
        LoraAdapter("sql", "/a"),
        (MultiModalFeature("img", 1, 3), MultiModalFeature("other", 5, 2)),
        tuple(t * 3 for t in tokens),
    )
    m = manager(n=20, bs=hbs * 2, hbs=hbs)
    features = [(f.identifier, f.offset, f.length) for f in extra.mm]
    assert m.admit("a", tokens, "s", lora=("sql", "/a"), mm_features=features,
                   prompt_embeds=extra.embeds) is not None  # fmt: skip
    m.append("a", [40, 41, 42])
    want = partitioned_block_hashes([*tokens, 40, 41, 42], hbs, "s", extra, ALL_ATTRIBUTES)
    assert m.requests["a"].request.block_hashes == list(want)


@pytest.mark.parametrize("salt", [None, "s"])
def test_appended_tokens_extend_the_hashes_as_a_full_rehash_would(salt: str | None) -> None:
    m = manager(n=20, bs=4, hbs=2)
    assert m.admit("a", [1, 2, 3], salt) is not None
    for chunk in ([4], [5, 6, 7], [8], [9, 10, 11, 12, 13]):
        assert m.append("a", chunk) is not None
    req = m.requests["a"].request
    assert req.all_token_ids == list(range(1, 14))
    assert req.block_hashes == hashes_of(range(1, 14), 2, salt)


def test_a_given_hash_function_hashes_every_block_admitted_and_appended() -> None:
    inputs: list[object] = []

    def numbering(value: object) -> bytes:
        inputs.append(value)
        return len(inputs).to_bytes(4, "big")

    m = KVCacheManager(20, 2, hash_block_size=2, hash_function=numbering)
    assert m.admit("a", [1, 2, 3, 4, 5], "s") is not None
    assert m.append("a", [6, 7]) is not None
    req = m.requests["a"].request
    assert req.block_hashes == [n.to_bytes(4, "big") for n in (1, 2, 3)]
    # each input is (parent, the block's tokens, extra keys), chained on the given digests
    assert [v[1:] for v in inputs] == [((1, 2), ("s",)), ((3, 4), ("s",)), ((5, 6), ("s",))]
    assert [v[0] for v in inputs][1:] == req.block_hashes[:2]


def test_tokens_of_64_bits_and_more_are_taken_and_hashed_as_the_spec_does() -> None:
    tokens = [1 << 64, (1 << 70) + 1, 5, 0]
    m = manager(n=20, bs=4, hbs=2)
    assert m.admit("a", tokens) is not None
    assert m.requests["a"].request.block_hashes == hashes_of(tokens, 2, None)


def test_a_refused_admission_hashes_only_as_far_as_its_lookup_reads() -> None:
    """A new request's lookup hashes a run of 16 blocks, misses in it, and the pool has no
    room: its other 84 blocks are never hashed."""
    hashed: list[object] = []

    def counting(value: object) -> bytes:
        hashed.append(value)
        return sha256_hash(value)

    m = KVCacheManager(20, 4, hash_block_size=2, hash_function=counting)
    assert m.admit("long", list(range(400))) is None
    assert len(hashed) == 16 * 2  # 16 blocks of 2 hash blocks each
    assert "long" not in m.requests


@pytest.mark.parametrize("shared_blocks", [0, 15, 16, 17, 47, 48, 49, 74])
def test_hits_across_the_hashed_runs_are_the_whole_cached_prefix(shared_blocks: int) -> None:
    """Runs of 16, 32, 64 blocks: a prefix ending inside or at the edge of any of them."""
    m = manager(n=120, bs=4, hbs=2)
    first = list(range(300))
    run(m, "a", first)
    m.finish("a")
    other = [*first[: shared_blocks * 4], *range(1000, 1000 + 100)]
    admitted = m.admit("b", other)
    assert admitted is not None
    assert admitted.num_computed_tokens == shared_blocks * 4
    assert m.requests["b"].request.block_hashes == hashes_of(other, 2)


# ------------------------------------------------------------------ admission


def test_admit_without_a_hit_allocates_fresh_blocks_for_every_token(check: Check) -> None:
    m = manager(n=10, bs=2, groups=(FULL_ATTENTION, FULL_ATTENTION))
    got = m.admit("a", [1, 2, 3, 4, 5])
    assert got == Scheduled(0, ((1, 2, 3), (4, 5, 6)), ())
    assert all(ref(m, b) == 1 for b in range(1, 7))
    assert free_queue(m) == [7, 8, 9]
    assert m.is_running("a") and m.get_num_computed_tokens("a") == 0
    check(m.block_pool)


def test_full_prefix_hit_shares_blocks_and_counts_references(check: Check) -> None:
    m = manager(n=10, bs=2)
    run(m, "a", [1, 2, 3, 4, 5])  # blocks 1, 2 full and cached; 3 holds token 5
    got = m.admit("b", [1, 2, 3, 4, 9, 9])
    assert got is not None
    assert got.num_computed_tokens == 4
    assert got.block_ids == ((1, 2, 4),)
    assert (ref(m, 1), ref(m, 2), ref(m, 3), ref(m, 4)) == (2, 2, 1, 1)
    check(m.block_pool)


def test_a_different_salt_never_hits() -> None:
    m = manager(n=16, bs=2)
    run(m, "a", [1, 2, 3, 4, 5], salt="alice")
    got = m.admit("b", [1, 2, 3, 4, 5], salt="bob")
    assert got is not None and got.num_computed_tokens == 0
    assert set(got.block_ids[0]).isdisjoint({1, 2, 3})
    unsalted = m.admit("c", [1, 2, 3, 4, 5])
    assert unsalted is not None and unsalted.num_computed_tokens == 0
    same = m.admit("d", [1, 2, 3, 4, 5], salt="alice")
    assert same is not None and same.block_ids[0][:2] == (1, 2)


def test_a_prompt_never_hits_in_full() -> None:
    m = manager(n=10, bs=2)
    run(m, "a", [1, 2, 3, 4])  # both blocks full and cached
    got = m.admit("b", [1, 2, 3, 4])
    assert got is not None
    # (4 - 1) // 2 = 1 block may hit: the last token is always computed again.
    assert got.num_computed_tokens == 2
    assert got.block_ids[0][0] == 1 and got.block_ids[0][1] != 2
    assert ref(m, 2) == 1


def test_no_room_returns_none_and_changes_nothing(snapshot: Snapshot) -> None:
    m = manager(n=6, bs=2)
    run(m, "a", [1, 2, 3, 4])
    m.finish("a")  # blocks 1, 2 free but cached
    assert m.admit("b", [7, 7, 7, 7]) is not None  # takes 3, 4
    before = snapshot(m.block_pool)
    # needs 3 new blocks + 2 free hits = 5 > 3 free
    assert m.admit("c", [1, 2, 3, 4, 5, 6, 7, 8, 9]) is None
    assert snapshot(m.block_pool) == before
    assert "c" not in m.requests
    with pytest.raises(KVCacheManagerError):
        m.get_block_ids("c")


def test_free_hits_count_against_the_room_and_held_hits_do_not() -> None:
    m = manager(n=5, bs=2)
    run(m, "a", [1, 2, 3, 4])
    m.finish("a")  # 1, 2 cached and free
    assert free_queue(m) == [3, 4, 2, 1]
    # 2 free hits + 3 new = 5 > 4 free, although the 3 new blocks alone would fit
    assert m.admit("b", [1, 2, 3, 4, 5, 6, 7, 8, 9]) is None
    assert m.admit("c", [1, 2, 3, 4, 5]) == Scheduled(4, ((1, 2, 3),))
    assert free_queue(m) == [4]
    # 1 and 2 are held by "c" now: "d" needs room for its one new block only
    assert m.admit("d", [1, 2, 3, 4, 9]) == Scheduled(4, ((1, 2, 4),))
    assert (ref(m, 1), ref(m, 2)) == (2, 2)


def test_touch_before_allocate_keeps_a_free_hit_at_the_front_of_the_queue() -> None:
    m = manager(n=5, bs=2)
    assert m.admit("a", [0, 1, 2, 3]) == Scheduled(0, ((1, 2),))
    assert m.admit("c", [5, 6, 7, 8]) == Scheduled(0, ((3, 4),))
    compute(m, "a")
    compute(m, "c")
    m.finish("a")
    m.finish("c")
    assert free_queue(m) == [2, 1, 4, 3]  # a's hits are evicted first
    got = m.admit("b", [0, 1, 2, 3, 9])  # hits 1, 2 (both free) + 1 new: 3 of 4 free
    assert got == Scheduled(4, ((1, 2, 4),))
    assert keyed(m, 1) and keyed(m, 2)
    assert (ref(m, 1), ref(m, 2), ref(m, 4)) == (1, 1, 1)
    assert free_queue(m) == [3]


def test_caching_off_never_hits_and_never_registers() -> None:
    m = manager(n=10, bs=2, caching=False)
    done = run(m, "a", [1, 2, 3, 4, 5])
    assert done == Scheduled(5, ((1, 2, 3),))
    assert not any(keyed(m, b) for b in range(1, 10))
    assert m.requests["a"].request.block_hashes == []
    m.finish("a")
    got = m.admit("b", [1, 2, 3, 4, 5])
    assert got is not None and got.num_computed_tokens == 0
    # unkeyed blocks go to the front when freed, tail first: reused in that order
    assert got.block_ids == ((3, 2, 1),)


# ------------------------------------------------------------------ partial hits


def partial_setup() -> KVCacheManager:
    """bs 4, hbs 1: "a" computed 6 tokens and cached its tail (block 2) as a partial
    entry over 6 tokens, then finished."""
    m = manager(n=8, bs=4, hbs=1)
    assert m.admit("a", [0, 1, 2, 3, 4, 5]) == Scheduled(0, ((1, 2),))
    compute(m, "a", cache_partial=True)
    m.finish("a")
    return m


def test_partial_hit_is_copied_and_its_source_held_until_copies_done(check: Check) -> None:
    m = partial_setup()
    assert free_queue(m) == [3, 4, 5, 6, 7, 2, 1]
    got = m.admit("b", [0, 1, 2, 3, 4, 5, 9, 9])
    # block 1 hits in full, block 2 as a partial entry over 2 more tokens; block 3 is its copy
    assert got == Scheduled(6, ((1, 3),), ((2, 3),))
    assert ref(m, 2) == 1 and 2 not in free_queue(m)  # the source is held for the copy
    assert m.is_block_writable(3)
    check(m.block_pool)
    m.copies_done("b")
    assert ref(m, 2) == 0 and free_queue(m)[-1] == 2 and keyed(m, 2)
    check(m.block_pool)
    m.copies_done("b")  # nothing pending: nothing happens
    assert ref(m, 2) == 0 and free_queue(m)[-1] == 2


def test_partial_hit_takes_the_largest_entry_that_leaves_a_token() -> None:
    m = partial_setup()
    # 7 tokens: the 6-token entry leaves one token; a 7-token prompt would need covered <= 6
    got = m.admit("b", [0, 1, 2, 3, 4, 5, 6])
    assert got is not None and got.num_computed_tokens == 6
    m.copies_done("b")
    # exactly 6 tokens: covered must stay <= 5, so the entry over 6 cannot be used
    got = m.admit("c", [0, 1, 2, 3, 4, 5])
    assert got is not None and got.num_computed_tokens == 4 and got.copies == ()


def test_partial_source_of_a_preempted_request_is_released() -> None:
    m = partial_setup()
    assert m.admit("b", [0, 1, 2, 3, 4, 5, 9]) is not None
    assert ref(m, 2) == 1
    m.preempt("b")  # the copy never completes: the held source is released with the rest
    assert all(ref(m, b) == 0 for b in range(1, 8))
    assert m.get_block_ids("b") == ((),)


# ------------------------------------------------------------------ running copy-on-write


def test_running_copy_on_write_moves_keys_to_the_copy_and_keeps_the_table(
    check: Check,
) -> None:
    m = manager(n=8, bs=4, hbs=1)
    assert m.admit("a", [0, 1, 2, 3, 4, 5]) == Scheduled(0, ((1, 2),))
    compute(m, "a", cache_partial=True)
    key6 = make_block_hash_with_group_id(hashes_of(range(6), 1)[5], 0)
    assert m.block_pool.blocks[2].block_hash == key6
    assert not m.is_block_writable(2)
    assert m.append("a", [6]) == Scheduled(6, ((1, 2),))
    prepared = m.prepare_write("a")
    assert prepared == Scheduled(6, ((1, 2),), ((2, 3),))
    assert ref(m, 3) == 1 and not keyed(m, 3)
    m.copies_done("a")
    assert m.is_block_writable(2)
    assert m.block_pool.blocks[3].block_hash == key6 and ref(m, 3) == 0
    assert free_queue(m)[-1] == 3
    assert m.block_pool.get_cached_block(hashes_of(range(6), 1)[5], [0]) == [m.block_pool.blocks[3]]
    assert m.commit("a") == Scheduled(7, ((1, 2),), ((2, 3),))
    check(m.block_pool)


def test_prepare_write_without_room_for_the_copy_returns_none(snapshot: Snapshot) -> None:
    m = manager(n=4, bs=4, hbs=1)
    assert m.admit("a", [0, 1, 2, 3, 4, 5]) is not None
    compute(m, "a", cache_partial=True)
    assert m.admit("b", [9]) is not None  # takes the last free block
    assert m.append("a", [6]) is not None
    before = snapshot(m.block_pool)
    assert m.prepare_write("a") is None
    assert snapshot(m.block_pool) == before
    assert m.requests["a"].pending_moves == []


def test_prepare_write_copies_nothing_when_the_tail_is_writable() -> None:
    m = manager(n=8, bs=4, hbs=1)
    assert m.admit("a", [0, 1, 2, 3, 4, 5]) is not None
    compute(m, "a")  # no partial entry: the tail stays writable
    assert m.append("a", [6]) is not None
    assert m.prepare_write("a") == Scheduled(6, ((1, 2),))
    assert free_queue(m) == [3, 4, 5, 6, 7]


# ------------------------------------------------------------------ registration


def test_commit_registers_newly_full_blocks_and_counts_them() -> None:
    m = manager(n=8, bs=2, hbs=1)
    assert m.admit("a", [1, 2, 3]) is not None
    assert compute(m, "a") == Scheduled(3, ((1, 2),))
    assert keyed(m, 1) and not keyed(m, 2)
    assert m.requests["a"].num_cached_blocks == [1]
    assert m.append("a", [4, 5]) is not None
    assert compute(m, "a") == Scheduled(5, ((1, 2, 3),))
    assert keyed(m, 2) and not keyed(m, 3)
    assert m.requests["a"].num_cached_blocks == [2]
    h = hashes_of([1, 2, 3, 4, 5], 1)
    assert m.block_pool.blocks[2].block_hash == make_block_hash_with_group_id(h[3], 0)


def test_every_group_registers_under_its_own_group_id() -> None:
    m = manager(n=8, bs=2, groups=(FULL_ATTENTION, FULL_ATTENTION))
    run(m, "a", [1, 2, 3])
    h = hashes_of([1, 2, 3], 1)[1]
    assert m.block_pool.blocks[1].block_hash == make_block_hash_with_group_id(h, 0)
    assert m.block_pool.blocks[3].block_hash == make_block_hash_with_group_id(h, 1)


# ------------------------------------------------------------------ sliding windows


def test_sliding_window_nulls_and_frees_blocks_that_left_the_window(check: Check) -> None:
    m = manager(n=12, bs=2, groups=(FULL_ATTENTION, SLIDING_1))
    assert m.admit("a", list(range(8))) == Scheduled(0, ((1, 2, 3, 4), (5, 6, 7, 8)))
    done = compute(m, "a")
    # 4 full blocks, window 1: entries 0..2 of the sliding group leave it, freed tail first
    assert done == Scheduled(8, ((1, 2, 3, 4), (0, 0, 0, 8)))
    assert free_queue(m) == [9, 10, 11, 7, 6, 5]
    assert all(keyed(m, b) for b in (5, 6, 7))
    assert m.append("a", [8, 9]) is not None
    assert compute(m, "a").block_ids == ((1, 2, 3, 4, 9), (0, 0, 0, 0, 10))
    assert free_queue(m)[-1] == 8
    check(m.block_pool)


def test_sliding_group_hit_only_needs_the_window() -> None:
    m = manager(n=12, bs=2, groups=(SLIDING_1,))
    run(m, "a", list(range(8)))  # table (0, 0, 0, 4); 1..3 freed but still cached
    m.finish("a")
    for b in (1, 2):
        m.block_pool.evict_blocks([b])  # the window does not need them
    got = m.admit("b", [*range(8), 99])
    assert got is not None
    assert got.num_computed_tokens == 8
    assert got.block_ids[0][:4] == (0, 0, 0, 4)
    assert ref(m, 3) == 0 and ref(m, 4) == 1


def test_sliding_window_miss_falls_back_to_a_shorter_prefix() -> None:
    m = manager(n=12, bs=2, groups=(SLIDING_2,))
    run(m, "a", list(range(8)))  # table (0, 0, 3, 4)
    m.finish("a")
    m.block_pool.evict_blocks([3])  # position 2 misses: lengths 4 and 3 need it
    got = m.admit("b", [*range(8), 99])
    assert got is not None
    assert got.num_computed_tokens == 4
    assert got.block_ids[0][:2] == (1, 2)
    assert len(got.block_ids[0]) == 5


def test_cache_partial_is_refused_with_a_sliding_group(snapshot: Snapshot) -> None:
    m = manager(n=12, bs=2, hbs=1, groups=(FULL_ATTENTION, SLIDING_1))
    assert m.admit("a", [1, 2, 3]) is not None
    assert m.prepare_write("a") == Scheduled(0, ((1, 2), (3, 4)))
    m.copies_done("a")
    before = snapshot(m.block_pool)
    with pytest.raises(KVCacheManagerError, match="partial-full-attention") as info:
        m.commit("a", cache_partial=True)
    assert info.value.rule == "partial-full-attention" and info.value.request_id == "a"
    assert snapshot(m.block_pool) == before
    assert m.get_num_computed_tokens("a") == 0


# ------------------------------------------------------------------ release


def test_finish_frees_each_table_tail_first() -> None:
    m = manager(n=10, bs=2, groups=(FULL_ATTENTION, FULL_ATTENTION))
    run(m, "a", [1, 2, 3, 4, 5, 6, 7])  # group 0: 1..4, group 1: 5..8; 3 full per group
    m.finish("a")
    # unkeyed tails (4, 8) go to the front; keyed blocks to the back, group by group, tail first
    assert free_queue(m) == [8, 4, 9, 3, 2, 1, 7, 6, 5]
    assert "a" not in m.requests


def test_free_tables_skips_nulls_and_empty_tables() -> None:
    """Sliding-window tables (the only ones holding the null block) lose their nulls; a
    full-attention table is freed whole, tail first."""
    m = manager(n=8, bs=2, groups=(SLIDING_1, FULL_ATTENTION, SLIDING_2, FULL_ATTENTION))
    calls: list[list[int]] = []
    m.block_pool.free_blocks = lambda blocks, evict_first=False: calls.append(  # type: ignore[method-assign]
        [b.block_id for b in blocks]
    )
    null = m.null_block
    b = m.block_pool.blocks
    m._free_tables([[null, null, b[3], b[4]], [], [null], [b[5], b[6]]])
    assert calls == [[4, 3], [6, 5]]


def test_preempt_frees_everything_and_resume_finds_the_prefix(check: Check) -> None:
    m = manager(n=10, bs=2)
    run(m, "a", [1, 2, 3, 4, 5])
    m.preempt("a")
    assert m.get_block_ids("a") == ((),)
    assert not m.is_running("a") and m.get_num_computed_tokens("a") == 0
    assert all(ref(m, b) == 0 for b in range(1, 10))
    got = m.resume("a")
    assert got is not None
    assert got.num_computed_tokens == 4 and got.block_ids[0][:2] == (1, 2)
    assert m.is_running("a")
    check(m.block_pool)


def test_resume_without_room_leaves_the_request_preempted() -> None:
    m = manager(n=4, bs=2)
    run(m, "a", [1, 2, 3, 4, 5])
    m.preempt("a")
    assert m.admit("b", [9, 9, 9, 9, 9]) is not None  # takes every free block
    assert m.resume("a") is None
    assert not m.is_running("a")
    m.finish("b")
    assert m.resume("a") is not None


def test_reset_succeeds_when_idle_and_is_refused_while_a_block_is_held() -> None:
    m = manager(n=8, bs=2)
    run(m, "a", [1, 2, 3])
    assert m.reset_prefix_cache() is False
    assert keyed(m, 1)
    m.preempt("a")
    assert m.reset_prefix_cache() is True
    assert not keyed(m, 1)
    got = m.resume("a")
    assert got is not None and got.num_computed_tokens == 0


# ------------------------------------------------------------------ append


def test_append_allocates_the_same_number_of_blocks_in_every_group() -> None:
    m = manager(n=12, bs=2, groups=(FULL_ATTENTION, FULL_ATTENTION))
    assert m.admit("a", [1]) == Scheduled(0, ((1,), (2,)))
    assert m.append("a", [2]) == Scheduled(0, ((1,), (2,)))  # fits in the tail
    assert m.append("a", [3, 4, 5]) == Scheduled(0, ((1, 3, 4), (2, 5, 6)))


def test_append_without_room_returns_none_and_changes_nothing(snapshot: Snapshot) -> None:
    m = manager(n=5, bs=2, groups=(FULL_ATTENTION, FULL_ATTENTION))
    assert m.admit("a", [1, 2, 3]) is not None  # 2 blocks per group: all 4 taken
    before = snapshot(m.block_pool)
    assert m.append("a", [4, 5]) is None
    assert snapshot(m.block_pool) == before
    assert m.requests["a"].request.all_token_ids == [1, 2, 3]


# ------------------------------------------------------------------ refusals


def busy() -> KVCacheManager:
    """Request "run" runs, "gone" is preempted, "cow" has a running copy pending, "pend" a
    partial-entry copy pending (bs 4, hbs 1)."""
    m = manager(n=16, bs=4, hbs=1)
    run(m, "run", [1, 2, 3])
    run(m, "gone", [4, 5, 6])
    m.preempt("gone")
    assert m.admit("cow", [7, 8, 9, 10, 11, 12]) is not None
    compute(m, "cow", cache_partial=True)
    assert m.append("cow", [13]) is not None
    prepared = m.prepare_write("cow")
    assert prepared is not None and prepared.copies
    got = m.admit("pend", [7, 8, 9, 10, 11, 12, 0])
    assert got is not None and got.copies
    return m


REFUSALS: list[tuple[str, str, Callable[[KVCacheManager], object]]] = [
    ("admit a live id", "request-new", lambda m: m.admit("run", [1])),
    ("admit a preempted id", "request-new", lambda m: m.admit("gone", [1])),
    ("admit no tokens", "request-tokens", lambda m: m.admit("x", [])),
    ("admit a negative token", "request-tokens", lambda m: m.admit("x", [1, -1])),
    ("admit a non-int token", "request-tokens", lambda m: m.admit("x", [1, "2"])),  # type: ignore[list-item]
    ("admit a bool token", "request-tokens", lambda m: m.admit("x", [1, True])),
    ("admit a float token", "request-tokens", lambda m: m.admit("x", [1, 2.0])),  # type: ignore[list-item]
    ("admit a huge negative token", "request-tokens", lambda m: m.admit("x", [1, -(1 << 70)])),
    ("append no tokens", "request-tokens", lambda m: m.append("run", [])),
    ("append a negative token", "request-tokens", lambda m: m.append("run", [-3])),
    ("append to a preempted request", "request-running", lambda m: m.append("gone", [1])),
    ("append to an unknown request", "request-running", lambda m: m.append("x", [1])),
    ("prepare_write preempted", "request-running", lambda m: m.prepare_write("gone")),
    ("commit unknown", "request-running", lambda m: m.commit("x")),
    ("preempt preempted", "request-running", lambda m: m.preempt("gone")),
    ("resume a running request", "request-preempted", lambda m: m.resume("run")),
    ("resume unknown", "request-preempted", lambda m: m.resume("x")),
    ("finish unknown", "request-known", lambda m: m.finish("x")),
    ("copies_done unknown", "request-known", lambda m: m.copies_done("x")),
    ("get_block_ids unknown", "request-known", lambda m: m.get_block_ids("x")),
    ("append with a running copy pending", "copies-pending", lambda m: m.append("cow", [1])),
    ("commit with a running copy pending", "copies-pending", lambda m: m.commit("cow")),
    ("prepare_write twice", "copies-pending", lambda m: m.prepare_write("cow")),
    ("append with a partial copy pending", "copies-pending", lambda m: m.append("pend", [1])),
]


def manager_snapshot(m: KVCacheManager) -> dict[str, Any]:
    def one(r: ManagedRequest) -> tuple[Any, ...]:
        return (
            r.running,
            r.tables(),
            r.num_computed_tokens,
            list(r.num_cached_blocks),
            list(r.request.all_token_ids),
            list(r.request.block_hashes),
            [(s.block_id, d.block_id) for s, d in r.pending_moves],
            [b.block_id for b in r.pending_release],
            r.copies,
        )

    return {rid: one(r) for rid, r in m.requests.items()}


@pytest.mark.parametrize(("name", "rule", "call"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_rule_and_change_nothing(
    name: str, rule: str, call: Callable[[KVCacheManager], object], snapshot: Snapshot
) -> None:
    m = busy()
    pool_before = snapshot(m.block_pool)
    manager_before = manager_snapshot(m)
    with pytest.raises(KVCacheManagerError) as info:
        call(m)
    assert info.value.rule == rule
    assert f"rule '{rule}'" in str(info.value)
    assert repr(info.value.request_id) in str(info.value)
    assert snapshot(m.block_pool) == pool_before
    assert manager_snapshot(m) == manager_before


def test_pending_copies_block_nothing_once_done() -> None:
    m = busy()
    m.copies_done("cow")
    m.copies_done("pend")
    assert m.commit("cow").num_computed_tokens == 7
    assert m.append("pend", [1]) is not None


def test_finish_with_a_running_copy_pending_releases_the_copy_without_moving_keys() -> None:
    m = busy()
    ((_src, dst),) = m.requests["cow"].copies
    m.finish("cow")
    assert not keyed(m, dst) and ref(m, dst) == 0
    assert free_queue(m)[0] == dst  # unkeyed: reused first


def test_errors_pickle_with_their_fields() -> None:
    import pickle

    err = KVCacheManagerError("append", "request-running", "r", "not running")
    back = pickle.loads(pickle.dumps(err))
    assert (back.operation, back.rule, back.request_id, back.detail) == (
        "append",
        "request-running",
        "r",
        "not running",
    )
    assert str(back) == str(err)


def test_is_block_writable_checks_the_id() -> None:
    m = manager(n=4)
    assert m.admit("a", [1]) is not None
    assert m.is_block_writable(1) and not m.is_block_writable(0) and not m.is_block_writable(2)
    with pytest.raises(ValueError):
        m.is_block_writable(4)


# ------------------------------------------------------------------ hooks


def test_each_hook_is_the_path_its_operation_takes() -> None:
    seen: list[str] = []

    class Recording(KVCacheManager):
        def _extend_block_hashes(self, req: ManagedRequest, through: int | None = None) -> None:
            seen.append("hashes" if through is None else f"hashes {through}")
            super()._extend_block_hashes(req, through)

        def _find_cached_prefix(self, req: ManagedRequest, num_tokens: int) -> Any:
            seen.append("find")
            return super()._find_cached_prefix(req, num_tokens)

        def _touch_and_allocate(
            self, hits: Sequence[KVCacheBlock], per_group: int
        ) -> list[list[KVCacheBlock]]:
            seen.append(f"touch_alloc {len(hits)} {per_group}")
            return super()._touch_and_allocate(hits, per_group)

        def _prepare_running_copy(
            self, request: ManagedRequest, tails: Sequence[tuple[int, KVCacheBlock]]
        ) -> list[tuple[int, int]]:
            seen.append(f"running_copy {[(g, b.block_id) for g, b in tails]}")
            return super()._prepare_running_copy(request, tails)

        def _free_tables(self, tables: Any) -> None:
            seen.append("free_tables")
            super()._free_tables(tables)

    m = Recording(8, 4)
    run(m, "a", [0, 1, 2, 3, 4, 5])
    # the lookup hashes the one block that can hit (it misses), then the block where
    # partial entries after the hits would be (the same one); the rest is hashed once
    # the request is admitted
    assert seen == ["find", "hashes 4", "hashes 4", "touch_alloc 0 2", "hashes"]
    seen.clear()
    compute(m, "a", cache_partial=True)
    assert m.append("a", [6]) is not None
    compute(m, "a")
    m.finish("a")
    assert seen == ["hashes", "running_copy [(0, 2)]", "free_tables"]  # append hashes too


# ------------------------------------------------------------------ lockstep with the spec


def drive(m: KVCacheManager, action: RequestAction) -> Scheduled | bool | None:
    """Run one request action on the impl the way an engine does."""
    match action:
        case Admit(request_id=rid, tokens=tokens, salt=salt):
            got = m.admit(rid, tokens, salt)
            if got is not None:
                m.copies_done(rid)
            return got
        case Resume(request_id=rid):
            got = m.resume(rid)
            if got is not None:
                m.copies_done(rid)
            return got
        case Append(request_id=rid, tokens=tokens):
            return m.append(rid, tokens)
        case Compute(request_id=rid, cache_partial=cache_partial):
            prepared = m.prepare_write(rid)
            if prepared is None:
                return None
            m.copies_done(rid)
            return m.commit(rid, cache_partial)
        case Preempt(request_id=rid):
            m.preempt(rid)
            return None
        case Finish(request_id=rid):
            m.finish(rid)
            return None
        case ResetCache():
            return m.reset_prefix_cache()
    raise TypeError(action)


def as_spec(result: Scheduled | bool | None) -> SpecScheduled | bool | None:
    if isinstance(result, Scheduled):
        return SpecScheduled(result.num_computed_tokens, result.block_ids, result.copies)
    return result


P = (10, 11, 12, 13, 14, 15, 16, 17, 18)

SCENARIOS: dict[str, tuple[int, int, int, tuple[int, ...], list[RequestAction]]] = {
    # name: (num_gpu_blocks, block_size, hash_block_size, windows, actions)
    "full attention, partial entries": (
        12,
        4,
        2,
        (0,),
        [
            Admit("a", P[:7]),
            Compute("a", cache_partial=True),
            Admit("b", (*P[:6], 1, 2, 3)),  # full hit + partial copy
            Compute("b"),
            Append("a", (20,)),
            Compute("a"),  # running copy-on-write
            Admit("s", P[:7], salt="x"),  # another salt: no hit
            Compute("s"),
            Preempt("a"),
            Finish("b"),
            Resume("a"),
            Compute("a", cache_partial=True),
            Admit("big", tuple(range(40))),  # no room
            ResetCache(),
            Finish("a"),
            Finish("s"),
            ResetCache(),
            Admit("c", P),
        ],
    ),
    "full and sliding groups": (
        16,
        2,
        1,
        (0, 2),
        [
            Admit("a", P[:8]),
            Compute("a"),
            Append("a", (30, 31, 32)),
            Compute("a"),
            Admit("b", (*P[:8], 40)),
            Compute("b"),
            Preempt("a"),
            Admit("c", (50, 51, 52)),
            Resume("a"),  # no room
            Compute("a"),  # refused: not running
            Finish("b"),
            Finish("c"),
            Resume("a"),
            Compute("a"),
            Append("a", (33,)),
            Compute("a"),
            Finish("a"),
            ResetCache(),
        ],
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_lockstep_with_the_reference_model(name: str, check: Check) -> None:
    n, bs, hbs, windows, actions = SCENARIOS[name]
    pool_config = PoolConfig(n, True, hbs, True)
    config = ManagerConfig(bs, tuple(KVGroup(w) for w in windows))
    pool_state = initial_state(pool_config)
    state = initial_manager_state(config, pool_config)
    m = KVCacheManager(n, bs, tuple(KVCacheGroupSpec(w) for w in windows), True, hbs, True)
    for i, action in enumerate(actions):
        where = f"step {i} ({action})"
        try:
            pool_state, state, expected = manager_step(pool_state, state, action)
        except ContractViolation as violation:
            with pytest.raises(KVCacheManagerError) as info:
                drive(m, action)
            assert info.value.rule == violation.rule, where
            continue
        got = drive(m, action)
        assert as_spec(got) == expected, where
        assert tuple(free_queue(m)) == pool_state.free_queue, where
        blocks = m.block_pool.blocks
        assert tuple(b.ref_cnt for b in blocks[1:]) == pool_state.ref_cnt[1:], where
        primary = [None if p is None else (p.key, p.num_tokens) for p in pool_state.primary]
        assert [
            None if b.block_hash is None else (b.block_hash, b.block_hash_num_tokens)
            for b in blocks
        ] == primary, where
        assert set(m.requests) == set(state.requests), where
        for rid, request in state.requests.items():
            assert m.get_block_ids(rid) == request.tables, where
            assert m.get_num_computed_tokens(rid) == request.num_computed_tokens, where
        check(m.block_pool)
