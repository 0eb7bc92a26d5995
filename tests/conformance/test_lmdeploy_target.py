"""LMDeploy's ``LogicalAllocator`` as a pool: the release's real file, loaded in isolation.

Each profile knob of ``lmdeploy`` is measured here on the real allocator, the two bugs the
issue names are shown on it directly and found by the suite on several seeds, and the
adapter's own structure checks are shown to catch planted faults.

Needs numpy (``pip install -e '.[lmdeploy]'``): without it every test here is
skipped, and says so. The 0.18.0 wheel is downloaded once into the cache (~110 MB).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip(
    "numpy", reason="LMDeploy's allocator needs numpy: pip install -e '.[lmdeploy]'"
)

import numpy as np
from kvpool.conformance.engines.lmdeploy import release as lm
from kvpool.conformance.engines.lmdeploy.allocator import (
    LmdeployAllocatorTarget,
)
from kvpool.conformance.machines.pool.levels import ROBUSTNESS, SAFETY
from kvpool.conformance.machines.pool.lockstep import replay
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.targets.loading import TargetLoadError, load_target
from kvpool.conformance.targets.releases.files import release_dir, valid_cache
from kvpool.spec import (
    FreeBlocks,
    GetNewBlocks,
    PoolConfig,
    Touch,
)
from kvpool.spec.profile import LMDEPLOY


@pytest.fixture(scope="module")
def release() -> lm.LmdeployRelease:
    return lm.load_release(lm.DEFAULT_VERSION)


def allocator(release: lm.LmdeployRelease, blocks: int) -> Any:
    return release.LogicalAllocator(num_cpu_blocks=0, num_gpu_blocks=blocks)


def ids(values: Any) -> list[int]:
    return [int(v) for v in values]


def free_list(alloc: Any) -> list[int]:
    n = alloc._num_blocks
    return ids(alloc._free_blocks[n - alloc._free_count :])


def target(release: lm.LmdeployRelease, blocks: int = 5) -> LmdeployAllocatorTarget:
    return LmdeployAllocatorTarget(release, PoolConfig(blocks), LMDEPLOY)


# --- loading ----------------------------------------------------------------------------


def test_the_cache_holds_the_file_with_its_manifest(release: lm.LmdeployRelease) -> None:
    where = release_dir(lm.FILES, lm.DEFAULT_VERSION)
    assert valid_cache(where, lm.FILES, lm.DEFAULT_VERSION)
    assert release.origin == where
    assert sorted(p.name for p in where.iterdir()) == ["lmdeploy", "manifest.json"]


def test_a_changed_cached_file_invalidates_the_cache(
    release: lm.LmdeployRelease, tmp_path: Path
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(release_dir(lm.FILES, lm.DEFAULT_VERSION), copy)
    assert valid_cache(copy, lm.FILES, lm.DEFAULT_VERSION)
    path = copy / lm.FILE
    path.write_text(path.read_text() + "\n# changed\n")
    assert not valid_cache(copy, lm.FILES, lm.DEFAULT_VERSION)


def test_loading_leaves_an_installed_lmdeploy_alone(release: lm.LmdeployRelease) -> None:
    installed = ModuleType("lmdeploy")
    sys.modules["lmdeploy"] = installed
    try:
        again = lm.load_tree(release.origin, release.version)
        assert sys.modules["lmdeploy"] is installed
        assert not any(n.startswith("lmdeploy.") for n in sys.modules)
        assert again.module.__name__ == lm.MODULE
    finally:
        del sys.modules["lmdeploy"]


def test_without_numpy_the_target_names_the_install_line(
    release: lm.LmdeployRelease, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(TargetLoadError, match=r"pip install -e '\.\[lmdeploy\]'"):
        load_target("lmdeploy==0.18.0")


def test_a_tree_without_the_allocator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TargetLoadError, match="holds no lmdeploy/pytorch/paging"):
        load_target(f"lmdeploy@{tmp_path}")


def test_a_bad_version_is_refused() -> None:
    with pytest.raises(TargetLoadError, match="not an LMDeploy release number"):
        load_target("lmdeploy==latest")


# --- the profile, measured --------------------------------------------------------------


def test_a_freed_block_is_reused_first_in_the_order_given(release: lm.LmdeployRelease) -> None:
    """unkeyed_free_to_front (and caching_off_free_to_front: it has no caching): a stack."""
    alloc = allocator(release, 5)
    assert ids(alloc.allocate(3, "gpu")) == [0, 1, 2]  # a fresh pool hands out in id order
    alloc.free(np.array([2, 0]))
    assert free_list(alloc) == [2, 0, 3, 4]
    assert ids(alloc.allocate(3, "gpu")) == [2, 0, 3]
    assert LMDEPLOY.unkeyed_free_to_front and LMDEPLOY.caching_off_free_to_front


def test_free_has_no_evict_first(release: lm.LmdeployRelease) -> None:
    assert list(inspect.signature(release.LogicalAllocator.free).parameters) == ["self", "blocks"]
    assert not LMDEPLOY.has_evict_first


def test_it_has_no_null_block(release: lm.LmdeployRelease) -> None:
    """Every block can be handed out: the adapter builds it one block short of the spec's
    pool and leaves the spec's null block out of its calls."""
    alloc = allocator(release, 4)
    assert ids(alloc.allocate(4, "gpu")) == [0, 1, 2, 3]
    pool = target(release, 4)
    assert pool.apply(GetNewBlocks(3)).result == (1, 2, 3)
    pool.apply(FreeBlocks((0, 2)))  # the null block listed: left out, as the spec skips it
    assert pool.view().free_queue == (2,)


def test_it_has_no_prefix_cache_and_a_hit_is_a_reference(release: lm.LmdeployRelease) -> None:
    """Only allocation, free, references and the free count: no keys, lookups or events.
    A hit (what the trie does on a match) is add_ref_count, so a touched block survives
    one free."""
    methods = {n for n, _ in inspect.getmembers(release.LogicalAllocator, inspect.isfunction)}
    assert {"allocate", "free", "add_ref_count", "get_num_free_blocks"} <= methods
    assert not methods & {"get_cached_block", "cache_full_blocks", "take_events", "touch"}
    assert LMDEPLOY.operations == {"get_new_blocks", "free_blocks", "touch", "get_num_free_blocks"}
    pool = target(release)
    pool.apply(GetNewBlocks(1))
    pool.apply(Touch((1,)))
    pool.apply(FreeBlocks((1,)))
    assert pool.view().ref_cnt == (0, 1, 0, 0, 0)
    assert 1 not in (pool.view().free_queue or ())


# --- the bugs, on the real code ---------------------------------------------------------


def test_a_double_free_leaves_the_count_at_minus_one(release: lm.LmdeployRelease) -> None:
    alloc = allocator(release, 4)
    block = alloc.allocate(1, "gpu")
    alloc.free(block)
    alloc.free(block)  # not refused
    assert int(alloc.get_ref_count(block)[0]) == -1


def test_a_block_listed_twice_is_leaked(release: lm.LmdeployRelease) -> None:
    """free([b, b]) on a block held twice: the count reaches 0, then writing both copies
    into the free list fails, and the block is in neither the free list nor any hold."""
    alloc = allocator(release, 4)
    b = alloc.allocate(1, "gpu")
    alloc.add_ref_count(b, 1)
    with pytest.raises(ValueError, match="could not broadcast"):
        alloc.free(np.array([b[0], b[0]]))
    assert int(alloc.get_ref_count(b)[0]) == 0
    assert int(b[0]) not in free_list(alloc)


SEEDS = (1, 2, 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_suite_finds_the_block_listed_twice(release: lm.LmdeployRelease, seed: int) -> None:
    factory, _ = load_target("lmdeploy==0.18.0")
    result = run_level(
        factory,
        LMDEPLOY,
        SAFETY,
        max_examples=40,
        steps=20,
        seed=seed,
        max_blocks=6,
        max_findings=2,
        shrink_seconds=5,
    )
    messages = [f.message for f in result.failures]
    assert messages, "LMDeploy's free of a block listed twice no longer fails"
    # either face: both copies written into the free list, or the write raises (a leak)
    assert all(
        "lists a block twice" in m or "refused although it is allowed: ValueError" in m
        for m in messages
    ), messages


@pytest.mark.parametrize("seed", SEEDS)
def test_the_suite_finds_the_double_free(release: lm.LmdeployRelease, seed: int) -> None:
    factory, _ = load_target("lmdeploy==0.18.0")
    result = run_level(
        factory,
        LMDEPLOY,
        ROBUSTNESS,
        max_examples=40,
        steps=20,
        seed=seed,
        max_blocks=6,
        max_findings=6,
        shrink_seconds=5,
    )
    kinds = {signature(f.message) for f in result.failures}
    assert "free_blocks rule free-held (a free block)" in kinds, kinds


def test_a_double_free_breaks_rule_free_held(release: lm.LmdeployRelease) -> None:
    factory, _ = load_target("lmdeploy==0.18.0")
    config = PoolConfig(3)
    message, _ = replay(
        factory, LMDEPLOY, ROBUSTNESS, config, [GetNewBlocks(1), FreeBlocks((1,)), FreeBlocks((1,))]
    )
    assert message is not None and "rule 'free-held'" in message
    assert "released 1 time(s) but held 0" in message


# --- the adapter's structure checks catch planted faults ---------------------------------


def test_structure_catches_two_blocks_on_one_physical_block(release: lm.LmdeployRelease) -> None:
    pool = target(release)
    pool.apply(GetNewBlocks(2))
    assert pool.structure_problems() == []
    pool.allocator._log_mem.phy_map[1] = pool.allocator._log_mem.phy_map[0]
    assert any("both on physical block" in p for p in pool.structure_problems())


def test_structure_catches_a_block_listed_twice_and_negative_counts(
    release: lm.LmdeployRelease,
) -> None:
    pool = target(release)
    pool.apply(GetNewBlocks(2))
    pool.allocator._free_blocks[-1] = pool.allocator._free_blocks[-2]
    assert any("in the free list 2 times" in p for p in pool.structure_problems())
    pool = target(release)
    pool.allocator._log_mem.ref_count[0] = -1
    problems = pool.structure_problems()
    assert any("ref count -1" in p for p in problems), problems


def test_structure_catches_the_physical_allocator_out_of_step(
    release: lm.LmdeployRelease,
) -> None:
    pool = target(release)
    pool.apply(GetNewBlocks(1))
    pool.allocator.get_phy_allocator("gpu")._free_count += 1
    assert any("physical blocks free" in p for p in pool.structure_problems())


def test_conform_reports_the_double_free_with_a_trace(
    release: lm.LmdeployRelease, tmp_path: Path
) -> None:
    from click.testing import CliRunner
    from kvpool.conformance.cli import main

    args = ["conform", "--target", "lmdeploy==0.18.0", "--machine", "pool", "--level"]
    args += ["robustness", "-n", "25", "--steps", "15", "--seed", "1", "--no-coverage"]
    result = CliRunner().invoke(main, [*args, "--trace-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "rule 'free-held': block" in result.output and "held 0" in result.output
    assert "kvpool replay" in result.output and list(tmp_path.glob("*.itf.json"))


def test_diff_against_another_pool_shows_the_block_listed_twice(
    release: lm.LmdeployRelease, tmp_path: Path
) -> None:
    """``kvpool diff`` between LMDeploy's allocator and our pool (the pool machine both
    share): with --shared-only only the actions both offer are drawn, and the one bug
    inside the contract is the difference."""
    from click.testing import CliRunner
    from kvpool.conformance.cli import main

    args = ["diff", "lmdeploy==0.18.0", "impl", "-n", "30", "--steps", "15", "--seed", "1"]
    args.append("--shared-only")
    result = CliRunner().invoke(main, [*args, "--trace-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "actions drawn (4): get_new_blocks, free_blocks, touch, get_num_free_blocks" in (
        result.output
    )
    assert "refused by A only" in result.output or "free count: A" in result.output
