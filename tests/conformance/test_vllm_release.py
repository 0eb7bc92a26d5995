"""Real released vLLM pools, end to end: downloaded once into the user's cache (so CI reuses
it), loaded without vLLM or torch, and checked in lockstep with the spec.

A failed download fails these tests with pip's own message: nothing is skipped silently.
The comparison with a fully installed vLLM is opt-in (``KVPOOL_FULL_VLLM=1``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.machines.pool.levels import LEVELS, ROBUSTNESS, SAFETY
from kvpool.conformance.machines.pool.lockstep import replay
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.targets.loading import TargetLoadError, load_target
from kvpool.spec import (
    Action,
    CacheFullBlocks,
    FreeBlocks,
    GetNewBlocks,
    PoolConfig,
    TakeEvents,
    get_profile,
)
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.profile import profile_for_version

RELEASE = "vllm==0.33.0"
PROFILE = get_profile("vllm-0.33")


@pytest.fixture(scope="module")
def vllm_0_33() -> Any:
    """The 0.33.0 target factory (downloads into the user's cache the first time)."""
    try:
        factory, _ = load_target(RELEASE)
    except TargetLoadError as exc:
        pytest.fail(f"could not load {RELEASE}: {exc}", pytrace=False)
    return factory


def vllm_modules() -> list[str]:
    return [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]


def test_the_release_loads_without_vllm_or_torch(vllm_0_33: Any) -> None:
    target = vllm_0_33(PoolConfig(4), PROFILE)
    assert type(target.pool).__module__ == "vllm.v1.core.block_pool"
    # in a fresh process: another test of this worker may have imported torch itself
    loads = (
        "import sys\n"
        "from kvpool.conformance.targets.loading import load_target\n"
        "from kvpool.spec import PoolConfig, get_profile\n"
        f"factory, _ = load_target('{RELEASE}')\n"
        "factory(PoolConfig(4), get_profile('vllm-0.33'))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", loads], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    if importlib.util.find_spec("vllm") is None:
        assert vllm_modules() == []
    assert target.operations >= {"unpin_blocks", "cache_partial_block", "peer_get_new_blocks"}
    assert target.observes >= {"free_queue", "ref_cnt", "keys", "events", "structure"}


@pytest.mark.parametrize(("release", "profile"), [("0.33.0", "vllm-0.33"), ("0.24.0", "vllm-0.24")])
def test_a_release_conforms_to_its_profile(release: str, profile: str) -> None:
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--no-coverage",
            "--target",
            f"vllm=={release}",
            "--profile",
            profile,
            "--machine",
            "pool",
            "--level",
            "safety,order",
            "--max-examples",
            "40",
            "--seed",
            "7",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "every run passed" in result.output


def test_the_spec_s_manager_drives_the_release(vllm_0_33: Any) -> None:
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--no-coverage",
            "--target",
            RELEASE,
            "--profile",
            "vllm-0.33",
            "--machine",
            "requests",
            "--manager",
            "none",
            "--max-examples",
            "25",
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output


def finding(config: PoolConfig, *actions: Action) -> str | None:
    factory, _ = load_target(RELEASE)
    problem, _ = replay(factory, PROFILE, ROBUSTNESS, config, actions)
    return problem


def test_robustness_findings_of_0_33(vllm_0_33: Any) -> None:
    """The out-of-contract behaviour SEMANTICS.md lists, each shown by its shortest trace."""
    double_free = finding(PoolConfig(4), GetNewBlocks(1), FreeBlocks((1,)), FreeBlocks((1,)))
    assert double_free is not None and "rule 'free-held'" in double_free
    twice_in_one_call = finding(PoolConfig(4), GetNewBlocks(2), FreeBlocks((1, 1)))
    assert twice_in_one_call is not None
    assert "block 1 is released 2 time(s) but held 1" in twice_in_one_call
    negative = finding(PoolConfig(4), GetNewBlocks(-1))
    assert negative is not None and "rule 'get-new-blocks-count'" in negative
    off = finding(
        PoolConfig(4, enable_caching=False),
        GetNewBlocks(1),
        CacheFullBlocks(request_block_hashes([1], 1), (1,), 0, 1, 1),
    )
    assert off is not None and "rule 'caching-enabled'" in off

    # What each leaves behind in the pool itself.
    pool = vllm_0_33(PoolConfig(4), PROFILE).pool
    pool.free_blocks([pool.blocks[1]])
    assert pool.blocks[1].ref_cnt == -1  # a double free goes unnoticed
    pool = vllm_0_33(PoolConfig(4), PROFILE).pool
    pool.get_new_blocks(-1)
    assert pool.get_num_free_blocks() == 4  # three blocks are free: the count is corrupt
    pool = vllm_0_33(PoolConfig(4), PROFILE).pool
    pool.get_new_blocks(2)
    pool.free_blocks([pool.blocks[1]] * 2)
    with pytest.raises(AssertionError):
        pool.get_new_blocks(2)  # upstream 42571: the block went back with ref_cnt -1
    assert pool.get_num_free_blocks() == 0  # ... and the pool lost its free blocks


def test_a_robustness_run_finds_an_out_of_contract_acceptance(vllm_0_33: Any) -> None:
    result = run_level(
        vllm_0_33, PROFILE, ROBUSTNESS, max_examples=60, steps=30, seed=1, max_blocks=8
    )
    assert result.failure is not None
    assert "was accepted although it breaks the contract" in result.failure.message
    assert len(result.failure.trace) <= 3


FULL = os.environ.get("KVPOOL_FULL_VLLM") == "1"


@pytest.mark.skipif(
    not FULL or importlib.util.find_spec("vllm") is None,
    reason="opt-in: KVPOOL_FULL_VLLM=1 with vLLM installed compares the isolated load with it",
)
def test_the_isolated_release_behaves_as_the_installed_package() -> None:
    from importlib import metadata

    version = metadata.version("vllm")
    installed, _ = load_target("vllm")
    isolated, _ = load_target(f"vllm=={version}")
    profile = profile_for_version(version)
    for level in (SAFETY, LEVELS["order"], ROBUSTNESS):
        a = run_level(installed, profile, level, max_examples=80, steps=30, seed=11, max_blocks=8)
        b = run_level(isolated, profile, level, max_examples=80, steps=30, seed=11, max_blocks=8)
        assert (a.record.steps, a.record.operations) == (b.record.steps, b.record.operations)
        assert (a.failure is None) == (b.failure is None)
        if a.failure is not None and b.failure is not None:
            assert a.failure.message == b.failure.message
            assert a.failure.trace == b.failure.trace


def test_an_unpacked_release_tree_is_a_target(vllm_0_33: Any) -> None:
    from kvpool.conformance.engines.vllm.distribution import release_dir

    tree = release_dir("0.33.0")  # the cache holds an unpacked wheel's block-pool files
    factory, name = load_target(f"vllm@{tree}")
    assert name == f"vllm@{tree} (0.33.0)"
    result = run_level(factory, PROFILE, SAFETY, max_examples=20, steps=20, seed=5, max_blocks=6)
    assert result.failure is None, result.failure


def test_the_installed_vllm_target_says_when_there_is_none() -> None:
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(TargetLoadError, match="vLLM is not installed in this environment"):
            load_target("vllm")
    else:
        _, name = load_target("vllm")
        assert name.startswith("vllm (installed ")


def test_the_pool_never_reaches_a_placeholder_while_it_runs(vllm_0_33: Any) -> None:
    from kvpool.conformance.engines.vllm.entry import load_vllm
    from kvpool.conformance.targets.loading import described

    release = load_vllm(described(RELEASE))
    assert release.release is not None
    factory = release.target_factory(RELEASE)
    for level in (SAFETY, ROBUSTNESS):
        run_level(factory, PROFILE, level, max_examples=40, steps=30, seed=2, max_blocks=8)
    assert release.release.placeholders.after_load == []


def test_event_hashes_published_as_integers_are_read_back_as_bytes(vllm_0_33: Any) -> None:
    """vLLM's default publishes the low 64 bits of each hash; the isolated load turns that
    off, the installed package may not: both must compare the same."""
    from kvpool.conformance.engines.vllm.entry import load_vllm
    from kvpool.conformance.targets.loading import described

    release = load_vllm(described(RELEASE))
    assert release.release is not None
    envs = release.release.modules["vllm.envs"]
    envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES = True  # type: ignore[attr-defined]
    factory = release.target_factory(RELEASE)
    target = factory(PoolConfig(4), PROFILE)
    hashes = request_block_hashes([1, 2], 1)
    target.apply(GetNewBlocks(2))
    target.apply(CacheFullBlocks(hashes, (1, 2), 0, 2, 1))
    raw = target.pool.kv_event_queue[0]
    assert all(isinstance(h, int) for h in raw.block_hashes)
    (stored,) = target.apply(TakeEvents()).result  # type: ignore[misc]
    assert stored.block_hashes == hashes
