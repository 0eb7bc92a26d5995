"""``kvpool diff`` on real vLLM releases: the release changes SEMANTICS.md records show up
as short traces, and two copies of one release show none.

Each release is downloaded once into the user's cache; when a wheel can be neither found
in the cache nor fetched (offline), its tests are skipped with pip's reason (a failure in
CI, where ``KVPOOL_REQUIRE_ENGINES`` is set: see ``tests/conftest.py``). Any other load
error, a loader bug, fails.
"""

from __future__ import annotations

import pytest
from kvpool.conformance.machines.pool.levels import ORDER, SAFETY, Level
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.targets.loading import TargetLoadError
from kvpool.conformance.tools.diff.loading import Pair, load_pair
from kvpool.conformance.tools.diff.run import DiffResult, run_diff
from kvpool.spec import CacheFullBlocks, FreeBlocks, GetNewBlocks


def release_pair(a: str, b: str, shared_only: bool = False) -> Pair:
    try:
        return load_pair(a, b, shared_only=shared_only)
    except TargetLoadError as exc:
        if "could not download" not in str(exc):
            raise  # the wheel is there: loading it failed, a bug to see
        pytest.skip(f"cannot load the releases (offline?): {exc}")


def diff(pair: Pair, level: Level, examples: int = 120, findings: int = 4) -> DiffResult:
    return run_diff(
        pair,
        level,
        max_examples=examples,
        steps=30,
        seed=1,
        max_blocks=8,
        max_findings=findings,
        shrink_seconds=5.0,
    )


def test_0_23_to_0_24_moves_freed_unkeyed_blocks_to_the_front() -> None:
    one_sided = release_pair("vllm==0.23.0", "vllm==0.24.0").common.one_sided
    assert one_sided == (
        ("free_blocks:evict_first", "A", "B (vllm==0.24.0) lacks it"),
        ("cache_partial_block", "B", "A (vllm==0.23.0) lacks it"),
    )
    # what changed in the calls both take: drawn alone
    pair = release_pair("vllm==0.23.0", "vllm==0.24.0", shared_only=True)
    left = dict(pair.common.left_out)
    assert left == {
        "free_blocks(evict_first)": "B (vllm==0.24.0) lacks it",
        "cache_partial_block": "A (vllm==0.23.0) lacks it",
    }
    result = diff(pair, ORDER)
    by_kind = {signature(d.message): d for d in result.differences}
    moved = by_kind.get("after free_blocks: free queue order")
    assert moved is not None, [d.message for d in result.differences]
    # hand out one unkeyed block and free it: 0.23 queues it at the back, 0.24 at the front
    assert moved.trace == (GetNewBlocks(1), FreeBlocks((1,), False, ()))
    assert moved.message == (
        f"after free_blocks: free queue order: A {[*range(2, moved.config.num_gpu_blocks), 1]}, "
        f"B {list(range(1, moved.config.num_gpu_blocks))}"
    )
    # 0.12-0.23 key a block spanning several hash blocks by their hashes concatenated
    rekeyed = [d for d in result.differences if "keys of block" in d.message]
    assert rekeyed and len(rekeyed[0].trace) == 2
    assert isinstance(rekeyed[0].trace[-1], CacheFullBlocks)
    assert all(len(d.trace) <= 4 for d in result.differences)


def test_0_26_to_0_27_1_sends_caching_off_frees_to_the_back() -> None:
    pair = release_pair("vllm==0.26.0", "vllm==0.27.1")
    assert pair.common.left_out == ()
    result = diff(pair, ORDER)
    assert len(result.differences) == 1, [d.message for d in result.differences]
    (outlier,) = result.differences
    assert outlier.config.enable_caching is False
    assert outlier.trace == (GetNewBlocks(1), FreeBlocks((1,), False, ()))
    assert "after free_blocks: free queue order" in outlier.message
    # only the order changed: at safety the two releases agree
    assert diff(pair, SAFETY, examples=60).differences == ()


def test_two_copies_of_one_release_agree() -> None:
    pair = release_pair("vllm==0.33.0", "vllm==0.33.0")
    result = diff(pair, ORDER, examples=80)
    assert result.differences == ()
    assert result.record.steps > 1000


def test_0_33_to_0_34_takes_evict_first_again() -> None:
    """0.34.0's ``free_blocks`` takes ``evict_first`` again (0.33.0's does not); inside the
    calls both take, the two releases agree at order (the weak pool reference, ``ref_cnt =
    1`` in ``get_new_blocks`` and block ids in the index show nowhere a caller can see)."""
    pair = release_pair("vllm==0.33.0", "vllm==0.34.0")
    assert pair.common.one_sided == (("free_blocks:evict_first", "B", "A (vllm==0.33.0) lacks it"),)
    result = diff(pair, ORDER)
    assert [d.message for d in result.differences] == [
        "free_blocks(evict_first): taken by B only; A's pool lacks it"
    ]
    (taken,) = result.differences
    assert taken.trace == (FreeBlocks((), True, ()),)
    shared = release_pair("vllm==0.33.0", "vllm==0.34.0", shared_only=True)
    assert diff(shared, ORDER).differences == ()
