"""The vllm-* profiles: which release gets which, and what each knob makes the spec do."""

from __future__ import annotations

import pytest
from kvpool.spec import (
    SEED,
    BlockRemoved,
    BlockStored,
    CacheFullBlocks,
    CachePartialBlock,
    ContractViolation,
    FreeBlocks,
    GetNewBlocks,
    PoolConfig,
    PoolState,
    TakeEvents,
    Touch,
    get_profile,
    initial_state,
    run,
    step,
    violation,
)
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.keys import make_key
from kvpool.spec.profile import PROFILES, profile_for_version

H = request_block_hashes([1, 2, 3, 4, 5, 6], 1)


@pytest.mark.parametrize(
    ("version", "profile"),
    [
        ("0.10.1", "vllm-0.10"),
        ("0.10.2", "vllm-0.10"),
        ("0.11.0", "vllm-0.10"),
        ("0.12.0", "vllm-0.12"),
        ("0.13.0", "vllm-0.13"),
        ("0.14.1", "vllm-0.14"),
        ("0.18.0", "vllm-0.14"),
        ("0.19.0", "vllm-0.19"),
        ("0.21.0", "vllm-0.19"),
        ("0.22.0", "vllm-0.22"),
        ("0.23.0", "vllm-0.23"),
        ("0.24.0", "vllm-0.24"),
        ("0.25.1", "vllm-0.24"),
        ("0.26.0", "vllm-0.26"),
        ("0.27.0", "vllm-0.27"),
        ("0.27.1", "vllm-0.27"),
        ("0.28.0", "vllm-0.26"),
        ("0.29.0", "vllm-0.29"),
        ("0.30.0", "vllm-0.30"),
        ("0.31.0", "vllm-0.31"),
        ("0.32.0", "vllm-0.32"),
        ("0.33.0", "vllm-0.33"),
        ("0.34.0rc1", "vllm-0.33"),
        ("0.34.0.dev118+g4ba787ec9", "vllm-0.33"),
        ("0.34.0", "vllm-0.34"),
        ("0.34.1", "vllm-0.34"),
        ("0.34.0.post1", "vllm-0.34"),
        ("0.35.0.dev3+gabc", "vllm-0.34"),
        ("0.33.0rc1", "vllm-0.32"),  # a pre-release comes before its release
        ("0.33.0.post1", "vllm-0.33"),
    ],
)
def test_each_release_gets_its_measured_profile(version: str, profile: str) -> None:
    assert profile_for_version(version).name == profile


def test_versions_without_a_profile_are_refused() -> None:
    with pytest.raises(ValueError, match="older than"):
        profile_for_version("0.10.0")
    with pytest.raises(ValueError, match="not a vLLM release number"):
        profile_for_version("main")


def test_every_vllm_profile_is_listed_and_described() -> None:
    names = [n for n in PROFILES if n.startswith("vllm-0.")]
    assert len(names) == 16
    for name in names:
        assert PROFILES[name].description.startswith("vLLM 0.")


def state(profile: str, blocks: int = 6, **config: object) -> PoolState:
    return initial_state(PoolConfig(blocks, **config), get_profile(profile))  # type: ignore[arg-type]


def test_old_releases_send_every_freed_block_to_the_back() -> None:
    s = run(state("vllm-0.10"), GetNewBlocks(3), FreeBlocks((2, 1)))
    assert s.free_queue == (4, 5, 2, 1)
    s = run(state("vllm-0.24"), GetNewBlocks(3), FreeBlocks((2, 1)))
    assert s.free_queue == (2, 1, 4, 5)


def test_prepend_of_0_23_sends_every_freed_block_to_the_front() -> None:
    keyed = run(state("vllm-0.23"), GetNewBlocks(2), CacheFullBlocks(H, (1, 2), 0, 2, 1))
    s = run(keyed, FreeBlocks((2, 1), evict_first=True))
    assert s.free_queue == (2, 1, 3, 4, 5)
    off = run(state("vllm-0.23", enable_caching=False), GetNewBlocks(2))
    assert run(off, FreeBlocks((1,), evict_first=True)).free_queue == (1, 3, 4, 5)
    assert run(off, FreeBlocks((1,))).free_queue == (3, 4, 5, 1)


def test_0_27_sends_caching_off_frees_to_the_back() -> None:
    off = run(state("vllm-0.27", enable_caching=False), GetNewBlocks(2), FreeBlocks((1,)))
    assert off.free_queue == (3, 4, 5, 1)
    on = run(state("vllm-0.27"), GetNewBlocks(2), FreeBlocks((1,)))
    assert on.free_queue == (1, 3, 4, 5)


def test_0_12_to_0_23_key_coarse_blocks_by_concatenated_hashes() -> None:
    s = run(state("vllm-0.14"), GetNewBlocks(1), CacheFullBlocks(H, (1,), 0, 1, 2))
    assert s.primary[1] is not None and s.primary[1].key == make_key(H[0] + H[1], 0)
    s = run(state("vllm-0.24"), GetNewBlocks(1), CacheFullBlocks(H, (1,), 0, 1, 2))
    assert s.primary[1] is not None and s.primary[1].key == make_key(H[1], 0)


def test_0_10_reads_the_parent_hash_off_the_parent_block() -> None:
    other = request_block_hashes([9, 9], 1)
    s = run(
        state("vllm-0.10"),
        GetNewBlocks(2),
        CacheFullBlocks(other, (1,), 0, 1, 1),
        TakeEvents(),
    )
    s, seen = step(run(s, CacheFullBlocks(H, (1, 2), 1, 2, 1)), TakeEvents())
    stored = seen.result
    assert isinstance(stored, tuple) and isinstance(stored[0], BlockStored)
    assert stored[0].parent_block_hash == other[0]  # the block's key, not the request's hash


@pytest.mark.parametrize(
    ("profile", "action", "rule"),
    [
        ("vllm-0.10", CacheFullBlocks(H, (1,), 0, 1, 2), "block-size-multiple"),
        ("vllm-0.10", CacheFullBlocks(H, (1, 2), 1, 2, 1), "cache-parent-keyed"),
        ("vllm-0.14", CacheFullBlocks(H, (1,), 0, 1, 1, block_mask=(True,)), "unsupported-action"),
        ("vllm-0.24", CachePartialBlock(H, 1, 2, 0, 2), "partial-tokens"),
        ("vllm-0.24", CachePartialBlock(H, 1, 1, 0, 1), "partial-tokens"),
        ("vllm-0.29", CachePartialBlock(H, 1, 1, 0, 2, True), "unsupported-action"),
    ],
)
def test_narrower_contracts_of_older_releases(profile: str, action: object, rule: str) -> None:
    s = run(state(profile, hash_block_size=1), GetNewBlocks(2))
    found = violation(s, action)  # type: ignore[arg-type]
    assert found is not None and found.rule == rule
    assert violation(run(initial_state(PoolConfig(6), SEED), GetNewBlocks(2)), action) is None  # type: ignore[arg-type]
    with pytest.raises(ContractViolation):
        step(s, action)  # type: ignore[arg-type]


def test_0_14_cannot_re_key_a_cached_block_but_0_24_promotes_it() -> None:
    actions = (GetNewBlocks(2), CachePartialBlock(H, 1, 1, 0, 2))
    promote = CacheFullBlocks(H, (1,), 0, 1, 2)
    assert violation(run(state("vllm-0.24"), *actions), promote) is None
    keyed = run(state("vllm-0.14"), GetNewBlocks(2), CacheFullBlocks(H, (1,), 0, 1, 1))
    again = violation(keyed, CacheFullBlocks(H, (2, 1), 1, 2, 2))
    assert again is not None and again.rule == "cache-fresh"
    assert violation(keyed, Touch((1,))) is None


@pytest.mark.parametrize(
    "profile", sorted(p for p in PROFILES if PROFILES[p].offers("cache_full_blocks"))
)
def test_no_profile_takes_the_null_block_out_of_caching_calls(profile: str) -> None:
    """The null block among the new full blocks is inside every profile's contract and is
    skipped: a release that caches it breaks 'null-block-inert', a finding at every level,
    never hidden by a profile saying it is out of contract."""
    s = run(state(profile, hash_block_size=1), GetNewBlocks(1))
    action = CacheFullBlocks(H, (0, 1), 0, 2, 1)
    assert violation(s, action) is None
    after, _ = step(s, action)
    assert after.keys_of(0) == ()
    assert after.keys_of(1) != ()


@pytest.mark.parametrize("profile", ["vllm-0.30", "vllm-0.33"])
def test_strong_pool_references_keep_a_freed_blocks_pool_alive(profile: str) -> None:
    # 0.30 on build KVCacheBlock(idx, pool=self): a block's pool outlives it, so freeing a
    # block of a pool this one does not see hands it back there and leaves this pool alone
    held = run(state(profile), GetNewBlocks(2))
    after, _ = step(held, FreeBlocks((1,), foreign=(1,)))
    assert violation(held, FreeBlocks((), foreign=(1,))) is None
    assert after.ref_cnt == run(held, FreeBlocks((1,))).ref_cnt
    assert after.free_queue == run(held, FreeBlocks((1,))).free_queue


def test_a_weak_pool_reference_refuses_a_block_whose_pool_is_gone() -> None:
    held = run(state("seed"), GetNewBlocks(2))
    problem = violation(held, FreeBlocks((), foreign=(1,)))
    assert problem is not None and problem.rule == "foreign-route"
    assert not get_profile("vllm-0.29").strong_pool_reference


def test_keys_that_die_on_free_are_removed_published_and_freed_as_unkeyed() -> None:
    from dataclasses import replace

    tiered = replace(SEED, name="tiered", keys_die_on_free=True)
    cached = (GetNewBlocks(2), CacheFullBlocks(H[:1], (1,), 0, 1, 1), TakeEvents())
    s = run(initial_state(PoolConfig(5), tiered), *cached)
    held_twice = run(s, Touch((1,)), FreeBlocks((1,)))
    assert held_twice.keys_of(1) != ()  # one holder left: the key lives
    s, seen = step(run(s, FreeBlocks((1,))), TakeEvents())
    assert s.keys_of(1) == () and s.free_queue[0] == 1  # freed as a block without a key
    assert seen.result == (BlockRemoved(H[0], 0),)
    kept = run(initial_state(PoolConfig(5), SEED), *cached, FreeBlocks((1,)))
    assert kept.keys_of(1) != () and kept.free_queue[-1] == 1
