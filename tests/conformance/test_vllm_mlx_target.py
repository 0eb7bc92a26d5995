"""The vllm-mlx target: each spec action lands on the right ``PagedCacheManager`` call, and the
pool's departures from the spec (its findings) still show, so a change upstream is noticed.

Without vllm-mlx installed, the target loads the one module it needs from the release's
wheel, downloaded once into the user's cache; none of these tests is skipped.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from fake_index import forget_downloads  # pytest puts this folder on sys.path
from kvpool.conformance.engines.vllm_mlx import pool as mlx
from kvpool.conformance.machines.pool.compare import INDEX_RULE
from kvpool.conformance.machines.pool.levels import ORDER, ROBUSTNESS, SAFETY, Level
from kvpool.conformance.machines.pool.lockstep import replay
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.machines.pool.target import OBSERVABLES, Target
from kvpool.spec import (
    SEED,
    Action,
    CacheFullBlocks,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    PoolConfig,
    Profile,
    ResetPrefixCache,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.keys import make_key

MLX = mlx.VLLM_MLX_PROFILE
A, B, C, D = (bytes([x]) * 4 for x in (0xAA, 0xBB, 0xCC, 0xDD))


def key(block_hash: bytes, group: int = 0) -> bytes:
    return make_key(block_hash, group)


def pool(num_blocks: int = 5, caching: bool = True, hbs: int = 1) -> mlx.VllmMlxTarget:
    """A fresh vllm-mlx target (fails with the install line if vllm-mlx is missing)."""
    return mlx.vllm_mlx_target(PoolConfig(num_blocks, caching, hbs), MLX)


def run(target: Target, *actions: Action) -> object:
    """Apply ``actions``; the last one's result."""
    result: object = None
    for action in actions:
        result = target.apply(action).result
    return result


def finding(
    level: Level, config: PoolConfig, *actions: Action, profile: Profile = MLX
) -> str | None:
    message, _ = replay(mlx.vllm_mlx_target, profile, level, config, list(actions))
    return message


# --- the package ------------------------------------------------------------------------


def test_vllm_mlx_is_installed_at_the_version_the_adapter_was_checked_with() -> None:
    mlx.load_paged_cache()
    assert mlx.installed_version() == mlx.VLLM_MLX_VERSION, (
        f"vllm-mlx {mlx.installed_version()} is installed; this adapter and its findings "
        f"were checked with {mlx.VLLM_MLX_VERSION}: re-run the suite and update them"
    )


def test_without_the_package_the_wheel_module_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setitem(sys.modules, "vllm_mlx.paged_cache", None)  # makes the import fail
    monkeypatch.setenv("KVPOOL_CACHE_DIR", str(tmp_path))
    module = mlx.load_paged_cache()
    assert module.__file__ is not None
    assert Path(module.__file__) == Path(
        str(tmp_path), "vllm-mlx", mlx.VLLM_MLX_VERSION, mlx.MEMBER
    )
    assert hasattr(module, "PagedCacheManager")
    assert sys.modules["vllm_mlx.paged_cache"] is None  # loaded in isolation, nothing left


def test_offline_and_uncached_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setitem(sys.modules, "vllm_mlx.paged_cache", None)
    monkeypatch.setenv("KVPOOL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    forget_downloads(monkeypatch)
    with pytest.raises(mlx.VllmMlxUnavailable, match="pip install --no-deps vllm-mlx"):
        mlx.vllm_mlx_target(PoolConfig(3), MLX)


def test_target_declares_only_the_operations_it_maps() -> None:
    target = pool()
    assert isinstance(target, Target)
    assert target.operations == {
        "get_new_blocks",
        "free_blocks",
        "touch",
        "cache_full_blocks",
        "get_cached_block",
        "reset_prefix_cache",
        "get_usage",
        "get_num_free_blocks",
    }
    assert target.observes == {"free_queue", "ref_cnt", "keys", "index", "structure"}
    assert target.observes <= set(OBSERVABLES)
    assert MLX.operations == target.operations


@pytest.mark.parametrize(
    "action",
    [
        UnpinBlocks((1,), "w1"),
        EvictBlocks((1,)),
        IsBlockWritable(1),
        FreeBlocks((1,), evict_first=True),
        FreeBlocks((), foreign=(1,)),
    ],
)
def test_undeclared_actions_raise_and_change_nothing(action: Action) -> None:
    target = pool()
    run(target, GetNewBlocks(1))
    before = target.view()
    with pytest.raises(NotImplementedError):
        target.apply(action)
    assert target.view() == before


def test_an_id_outside_the_pool_is_refused_before_any_call() -> None:
    target = pool(3)
    run(target, GetNewBlocks(2))
    before = target.view()
    for action in (Touch((3,)), FreeBlocks((-1,)), CacheFullBlocks((A,), (7,), 0, 1, 1)):
        with pytest.raises(IndexError, match=r"is not in 0\.\.2"):
            target.apply(action)
    assert target.view() == before


# --- ids, the null block, allocation and release ----------------------------------------


def test_block_ids_map_one_to_one_and_block_0_is_the_pools_null_block() -> None:
    target = pool(5)
    assert target.pool.null_block.block_id == 0
    assert target.view().free_queue == (1, 2, 3, 4)
    assert run(target, GetNewBlocks(3)) == (1, 2, 3)
    assert run(target, GetNewBlocks(1)) == (4,)
    assert run(target, GetNumFreeBlocks()) == 0
    assert run(target, GetUsage()) == 1.0
    assert target.structure_problems() == []


def test_free_releases_one_reference_per_listing_and_queues_at_the_back() -> None:
    target = pool(5)
    run(target, GetNewBlocks(3), Touch((2,)))
    assert target.view().ref_cnt[1:] == (1, 2, 1, 0)
    run(target, FreeBlocks((3, 0, 2, 1)))  # the null block is skipped
    view = target.view()
    assert view.ref_cnt[1:] == (0, 1, 0, 0)
    assert view.free_queue == (4, 3, 1)  # every freed block goes behind the old back
    assert run(target, GetUsage()) == pytest.approx(0.25)
    assert target.structure_problems() == []


def test_touch_pulls_a_free_cached_block_out_of_the_queue() -> None:
    target = pool(4)
    run(target, GetNewBlocks(2), CacheFullBlocks((A, B), (1, 2), 0, 2, 1), FreeBlocks((2, 1)))
    assert target.view().free_queue == (3, 2, 1)
    run(target, Touch((1, 0)))
    view = target.view()
    assert view.free_queue == (3, 2)
    assert view.ref_cnt[1] == 1
    assert target.structure_problems() == []


def test_over_allocation_is_refused_with_nothing_changed() -> None:
    target = pool(3)
    before = target.view()
    with pytest.raises(ValueError, match="Cannot allocate 3 blocks"):
        target.apply(GetNewBlocks(3))
    assert target.view() == before


# --- keys -------------------------------------------------------------------------------


def test_cache_full_blocks_keys_each_new_block_by_the_hash_at_its_end_and_its_group() -> None:
    target = pool(6, hbs=1)
    run(target, GetNewBlocks(4))
    # block_size 2 over hash_block_size 1: blocks end at hashes 1 and 3; block 1 is cached
    run(target, CacheFullBlocks((A, B, C, D), (1, 2, 3), 1, 2, 2, group_id=7))
    view = target.view()
    assert view.keys is not None and view.primary is not None
    assert view.keys[1:4] == (frozenset(), frozenset({key(D, 7)}), frozenset())
    assert view.primary[2] == key(D, 7)


def test_a_block_mask_is_refused_with_nothing_changed() -> None:
    target = pool(5)
    run(target, GetNewBlocks(2))
    before = target.view()
    with pytest.raises(NotImplementedError, match="no block_mask"):
        target.apply(CacheFullBlocks((A, B), (1, 2), 0, 2, 1, 0, (True, False)))
    assert target.view() == before


def test_each_spec_key_is_one_pool_key_whatever_the_block_before_it_holds() -> None:
    """The pool chains its own hashes onto the block before; one call per block keeps one
    spec key = one pool key, so a prefix cached behind different blocks still hits."""
    target = pool(6)
    run(target, GetNewBlocks(4))
    run(target, CacheFullBlocks((A, B), (1, 2), 0, 2, 1))
    run(target, CacheFullBlocks((C, B), (3, 4), 0, 2, 1))
    assert target.pool.blocks[2].block_hash == target.pool.blocks[4].block_hash
    assert run(target, GetCachedBlock(B, (0,))) == (2,)  # the earliest of the duplicates


def test_get_cached_block_is_all_or_nothing_over_groups() -> None:
    target = pool(5)
    run(target, GetNewBlocks(3))
    run(target, CacheFullBlocks((A,), (1,), 0, 1, 1, 0), CacheFullBlocks((A,), (2,), 0, 1, 1, 1))
    assert run(target, GetCachedBlock(A, (0,))) == (1,)
    assert run(target, GetCachedBlock(A, (1, 0))) == (2, 1)
    assert run(target, GetCachedBlock(A, (0, 2))) is None
    assert run(target, GetCachedBlock(B, (0,))) is None
    assert run(target, GetCachedBlock(A, ())) == ()


def test_reallocating_a_cached_block_drops_its_key() -> None:
    target = pool(3)
    run(target, GetNewBlocks(2), CacheFullBlocks((A,), (1,), 0, 1, 1), FreeBlocks((2, 1)))
    assert run(target, GetCachedBlock(A, (0,))) == (1,)
    assert run(target, GetNewBlocks(1)) == (2,)
    assert run(target, GetCachedBlock(A, (0,))) == (1,)
    assert run(target, GetNewBlocks(1)) == (1,)
    assert run(target, GetCachedBlock(A, (0,))) is None
    view = target.view()
    assert view.keys is not None and view.keys[1] == frozenset()


def test_lookups_miss_with_caching_off() -> None:
    target = pool(3, caching=False)
    run(target, GetNewBlocks(1))
    assert run(target, GetCachedBlock(A, (0,))) is None


def test_reset_prefix_cache_refuses_while_a_block_is_held() -> None:
    target = pool(4)
    run(target, GetNewBlocks(2), CacheFullBlocks((A, B), (1, 2), 0, 2, 1), FreeBlocks((1,)))
    assert run(target, ResetPrefixCache()) is False
    run(target, FreeBlocks((2,)))
    assert run(target, ResetPrefixCache()) is True
    view = target.view()
    assert view.keys is not None and not any(view.keys)
    assert view.free_queue == (3, 1, 2)
    assert run(target, GetCachedBlock(A, (0,))) is None


# --- in lockstep ------------------------------------------------------------------------

IN_CONTRACT = (
    GetNewBlocks(3),
    CacheFullBlocks((A, B), (1, 2), 0, 2, 1),
    Touch((1, 2)),
    FreeBlocks((2, 1)),
    FreeBlocks((3, 2, 1)),
    GetCachedBlock(B, (0,)),
    GetNewBlocks(2),
    Touch((0, 1)),
    GetCachedBlock(A, (0, 1)),
    GetUsage(),
    FreeBlocks((1, 0, 4, 3)),
    ResetPrefixCache(),
    GetNumFreeBlocks(),
)
CACHING_OFF = (
    GetNewBlocks(3),
    Touch((1, 2)),
    FreeBlocks((2, 1)),
    FreeBlocks((3, 2, 1)),
    GetNewBlocks(2),
    GetCachedBlock(A, (0,)),
    GetUsage(),
    FreeBlocks((4,)),
    ResetPrefixCache(),
    FreeBlocks((3,)),
    ResetPrefixCache(),
    GetNumFreeBlocks(),
)


@pytest.mark.parametrize("level", [SAFETY, ORDER], ids=lambda lv: lv.name)
def test_its_own_profile_describes_its_eviction_order(level: Level) -> None:
    for caching in (True, False):
        actions = IN_CONTRACT if caching else CACHING_OFF
        assert finding(level, PoolConfig(5, caching), *actions) is None


# --- findings: where vllm-mlx 0.6.0 departs from the spec -------------------------------
# Each is the shrunk trace of a suite run, rewritten with readable hashes.


NULL_AMONG_NEW = (GetNewBlocks(1), CacheFullBlocks((A, B), (1, 0), 0, 2, 1))
REKEY_LATER = (
    GetNewBlocks(1),
    CacheFullBlocks((A,), (1,), 0, 1, 1),
    CacheFullBlocks((B, C), (0, 1), 1, 2, 1),  # block 1 now ends 2 tokens in
)


@pytest.mark.parametrize("level", [SAFETY, ORDER, ROBUSTNESS], ids=lambda lv: lv.name)
@pytest.mark.parametrize("profile", [SEED, MLX], ids=lambda p: p.name)
def test_finding_it_caches_the_null_block(level: Level, profile: Profile) -> None:
    """Under its own profile too, at every level: the profile does not hide it."""
    message = finding(level, PoolConfig(3), *NULL_AMONG_NEW, profile=profile)
    assert message is not None
    assert message.startswith(
        "after cache_full_blocks: the null block was cached (invariant 'null-block-inert': "
        "a lookup of its key hands it out as a cache hit): "
        f"block 0: keys expected [], got ['{key(B).hex()}']"
    ), message


def test_finding_a_keyed_block_cached_at_a_later_boundary_keeps_its_old_key() -> None:
    assert finding(SAFETY, PoolConfig(3), *REKEY_LATER, profile=SEED) == (
        f"after cache_full_blocks: block 1: keys expected ['{key(C).hex()}'], "
        f"got ['{key(A).hex()}']; "
        f"index: key {A.hex()} (group 0) maps to blocks [1], expected [] ({INDEX_RULE}); "
        f"index: key {C.hex()} (group 0) maps to blocks [], expected [1] ({INDEX_RULE})"
    )
    assert finding(ROBUSTNESS, PoolConfig(3), *REKEY_LATER) == (
        "cache_full_blocks was accepted although it breaks the contract: cache_full_blocks: "
        "block 1: rule 'cache-fresh': block 1 already has a key and profile 'vllm-mlx' "
        "cannot re-key it"
    )


def test_finding_it_has_no_block_mask() -> None:
    masked = CacheFullBlocks((A, B), (1, 2), 0, 2, 1, 0, (True, False))
    assert finding(SAFETY, PoolConfig(3), GetNewBlocks(2), masked, profile=SEED) == (
        "cache_full_blocks was refused although it is allowed: NotImplementedError: "
        "vllm-mlx's cache_full_blocks has no block_mask"
    )
    assert finding(ROBUSTNESS, PoolConfig(3), GetNewBlocks(2), masked) is None  # refused


@pytest.mark.parametrize("caching", [True, False])
def test_finding_a_freed_block_without_a_key_goes_to_the_back(caching: bool) -> None:
    actions = (GetNewBlocks(2), FreeBlocks((2,)))
    assert finding(ORDER, PoolConfig(4, caching), *actions, profile=SEED) == (
        "after free_blocks: free queue order: expected [2, 3], got [3, 2]"
    )
    assert finding(ORDER, PoolConfig(4, caching), *actions, profile=MLX) is None


ROBUSTNESS_FINDINGS = {
    "negative allocation accepted (the free count grows)": (
        PoolConfig(2),
        (GetNewBlocks(-1),),
        "get_new_blocks was accepted although it breaks the contract: get_new_blocks: "
        "rule 'get-new-blocks-count': asked for -1 blocks with 1 free",
    ),
    "freeing a free block: KeyError after ref_cnt went to -1": (
        PoolConfig(4),
        (FreeBlocks((3,)),),
        "free_blocks was refused (rule 'free-held') but the pool changed: "
        "block 3: ref_cnt changed from 0 to -1",
    ),
    "a block listed twice: KeyError, ref_cnt -1, the block lost": (
        PoolConfig(4),
        (GetNewBlocks(1), FreeBlocks((1, 1))),
        "free_blocks was refused (rule 'free-held') but the pool changed: "
        "block 1: ref_cnt changed from 1 to -1",
    ),
    "touching a free block with no key": (
        PoolConfig(2),
        (Touch((1,)),),
        "touch was accepted although it breaks the contract: touch: block 1: rule "
        "'touch-identity': block 1 is free and carries no key: not a cache hit",
    ),
    "caching with caching off: silently ignored": (
        PoolConfig(2, enable_caching=False),
        (GetNewBlocks(1), CacheFullBlocks((A,), (1,), 0, 1, 1)),
        "cache_full_blocks was accepted although it breaks the contract: cache_full_blocks: "
        "rule 'caching-enabled': blocks can only be cached while prefix caching is enabled",
    ),
    "caching a free block": (
        PoolConfig(2),
        (CacheFullBlocks((A,), (1,), 0, 1, 1),),
        "cache_full_blocks was accepted although it breaks the contract: cache_full_blocks: "
        "block 1: rule 'cache-held': a block being cached must be held by the request "
        "(ref_cnt >= 1)",
    ),
    "caching a fully cached block again: silently skipped": (
        PoolConfig(2),
        (
            GetNewBlocks(1),
            CacheFullBlocks((A,), (1,), 0, 1, 1),
            CacheFullBlocks((B,), (1,), 0, 1, 1),
        ),
        "cache_full_blocks was accepted although it breaks the contract: cache_full_blocks: "
        "block 1: rule 'cache-fresh': block 1 already has a key covering 1 tokens",
    ),
    "caching blocks the request has no tokens for": (
        PoolConfig(2),
        (GetNewBlocks(1), CacheFullBlocks((), (1,), 0, 1, 1)),
        "cache_full_blocks was accepted although it breaks the contract: cache_full_blocks: "
        "rule 'hashes-available': 0 hashes of 1 tokens do not cover 1 blocks of 1",
    ),
}


@pytest.mark.parametrize("name", sorted(ROBUSTNESS_FINDINGS))
def test_finding_out_of_contract_input_is_not_refused_cleanly(name: str) -> None:
    config, actions, expected = ROBUSTNESS_FINDINGS[name]
    assert finding(ROBUSTNESS, config, *actions) == expected


def test_finding_num_full_blocks_past_the_list_fails_after_caching_some() -> None:
    message = finding(
        ROBUSTNESS, PoolConfig(3), GetNewBlocks(1), CacheFullBlocks((A, B), (1,), 0, 2, 1)
    )
    assert message is not None
    assert message.startswith(
        "cache_full_blocks was refused (rule 'cache-range') but the pool changed: block 1: "
        "keys changed"
    )
    assert key(A).hex() in message


def test_finding_a_double_free_corrupts_its_allocated_index() -> None:
    target = pool(4)
    run(target, GetNewBlocks(1))
    with pytest.raises(KeyError):
        target.apply(FreeBlocks((1, 1)))
    assert target.view().free_queue == (2, 3)  # block 1 is neither held nor free
    assert target.structure_problems() == [
        "block 1 is out of the free list but missing from allocated_blocks"
    ]


#: Every finding above, as the suite words it whatever the blocks and hashes.
FINDING_PATTERNS = (
    r"after cache_full_blocks: the null block was cached \(invariant 'null-block-inert'.*",
    # under the seed's profile: touching the null block moves its count (vllm-mlx's does)
    r"after touch: block 0: ref_cnt expected 0, got \d+",
    r"after cache_full_blocks: block \d+: keys expected \['[0-9a-f]+'\], got \['[0-9a-f]+'\]"
    r"(; block \d+: keys expected \['[0-9a-f]+'\], got \['[0-9a-f]+'\])*",
    r"get_new_blocks was accepted although it breaks the contract: get_new_blocks: "
    r"rule 'get-new-blocks-count': asked for -\d+ blocks .*",
    r"free_blocks was refused \(rule 'free-held'\) but the pool changed: block \d+: ref_cnt "
    r"changed .*",
    r"touch was accepted although it breaks the contract: touch: block \d+: "
    r"rule 'touch-identity': .*",
    r"cache_full_blocks was accepted although it breaks the contract: cache_full_blocks: "
    r"(block \d+: )?rule '(caching-enabled|cache-held|cache-fresh|cache-distinct|"
    r"hashes-available)': .*",
    r"cache_full_blocks was refused \(rule 'cache-range'\) but the pool changed: block \d+: "
    r"keys changed .*",
    "cache_full_blocks was refused although it is allowed: NotImplementedError: "
    "vllm-mlx's cache_full_blocks has no block_mask",
)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("level", [SAFETY, ORDER], ids=lambda lv: lv.name)
def test_a_suite_run_inside_its_own_profile_finds_the_null_block_cached(
    level: Level, seed: int
) -> None:
    """The null block among the new full blocks is drawn at safety and order too (not
    dropped as outside the profile's contract), and the pool's caching it is the finding."""
    result = run_level(
        mlx.vllm_mlx_target, MLX, level, max_examples=60, steps=30, seed=seed, max_blocks=8
    )
    assert result.failure is not None, "vllm-mlx no longer caches the null block"
    assert "invariant 'null-block-inert'" in result.failure.message, result.failure.message
    assert result.record.operations["cache_full_blocks"] > 0


@pytest.mark.parametrize(
    ("profile", "level"), [(SEED, SAFETY), (MLX, ROBUSTNESS)], ids=["seed-safety", "robustness"]
)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_suite_run_finds_only_documented_findings(
    profile: Profile, level: Level, seed: int
) -> None:
    result = run_level(
        mlx.vllm_mlx_target, profile, level, max_examples=60, steps=30, seed=seed, max_blocks=8
    )
    assert result.failure is not None, "vllm-mlx now passes: its findings changed upstream"
    message = result.failure.message
    assert any(re.fullmatch(p, message) for p in FINDING_PATTERNS), message
