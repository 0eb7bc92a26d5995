"""Exit statuses mean one thing each: a target the suite cannot drive is a usage error (2)
listed in one message before anything runs, a crash of kvpool's own code is a bug (4) with
its traceback, and a finding (1) is always about the target."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm_api.adapter import VllmApiTarget
from kvpool.conformance.machines.pool import operations
from kvpool.conformance.machines.pool.fault import fault_of
from kvpool.conformance.machines.pool.levels import SAFETY
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.machines.pool.surface import SurfaceMismatch
from kvpool.conformance.machines.pool.target import Target
from kvpool.conformance.usage import EXIT_BUG, EXIT_FINDING, EXIT_USAGE
from kvpool.spec import GetNewBlocks, PoolConfig, Profile, violation
from kvpool.spec.profile import SEED
from surface_pools import IdsForBlocks  # on sys.path via pytest

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)  # failures write their traces here


def conform(*args: str) -> Result:
    return CliRunner().invoke(
        main, ["conform", "--no-coverage", "--max-examples", "20", "--seed", "1", *args]
    )


def test_a_pool_lacking_a_method_exits_2_naming_it_before_any_test_case() -> None:
    result = conform("--target", "surface_pools:NoFreeCount")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "has no method get_num_free_blocks" in result.output
    assert "reference/actions/get_num_free_blocks.md" in result.output
    assert "Nonconformance" not in result.output
    assert "pool/safety" not in result.output  # nothing ran: no result table


def test_a_signature_the_suite_cannot_call_exits_2_with_the_signature() -> None:
    result = conform("--target", "surface_pools:OneArgumentLookup")
    assert result.exit_code == EXIT_USAGE, result.output
    assert (
        "get_cached_block cannot be called as get_cached_block(block_hash, kv_cache_group_ids)"
        in (result.output)
    )
    assert "its signature is get_cached_block(block_hash: 'bytes')" in result.output
    assert "Nonconformance" not in result.output


def test_everything_missing_is_listed_in_one_message() -> None:
    result = conform("--target", "surface_pools:NoBlocksAndNoFreeCount")
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.output.count("error:") == 1
    assert "has no method get_num_free_blocks" in result.output
    assert "has no blocks list" in result.output


def _adapted(pool: type) -> object:
    def target(config: PoolConfig, profile: Profile) -> Target:
        return VllmApiTarget(pool, config, profile, name=pool.__name__)

    return target


def test_a_call_that_fails_at_the_suites_side_mid_run_is_a_mismatch_not_a_finding() -> None:
    # handing out ids instead of blocks shows in no signature: the run meets it
    with pytest.raises(SurfaceMismatch, match="block_id"):
        run_level(
            _adapted(IdsForBlocks),  # type: ignore[arg-type]
            SEED,
            SAFETY,
            max_examples=10,
            steps=10,
            seed=1,
            max_blocks=6,
            shrink_seconds=0.5,
        )


def test_the_mid_run_mismatch_exits_2_from_the_command() -> None:
    result = conform("--target", "surface_pools:IdsForBlocks", "--level", "safety")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "does not take a call the suite makes" in result.output
    assert "Nonconformance" not in result.output


def test_a_crash_in_the_pools_own_code_is_a_finding_with_its_actions() -> None:
    result = conform("--target", "surface_pools:TouchCrashes", "--level", "safety")
    assert result.exit_code == EXIT_FINDING, result.output
    assert "touch was refused although it is allowed: RuntimeError" in result.output
    assert "Shrunk action sequence (0 actions)" not in result.output


def test_a_planted_crash_in_the_harness_exits_4_with_the_command_and_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the harness's own index of the operation table loses an entry: drawing raises KeyError
    operations.named("get_new_blocks")  # the index is built
    index = {n: op for n, op in operations._Index.by_name.items() if n != "get_new_blocks"}
    monkeypatch.setattr(operations._Index, "by_name", index)
    result = conform("--target", "impl", "--machine", "pool", "--level", "safety")
    assert result.exit_code == EXIT_BUG, result.output
    assert "this is a bug in kvpool" in result.output
    assert (
        "Reproduce with: kvpool conform --no-coverage --max-examples 20 --seed 1" in result.output
    )
    assert "Traceback (most recent call last)" in result.output
    assert "KeyError: 'get_new_blocks'" in result.output
    assert "Nonconformance" not in result.output


def test_a_rule_broken_by_building_the_pool_is_reported_once_per_run() -> None:
    result = conform("--target", "surface_pools:FreeCountOffByOne", "--machine", "pool")
    assert result.exit_code == EXIT_FINDING, result.output
    assert "after construction: free count" in result.output
    # one finding per level, each of 0 actions: building the pool broke the rule
    assert "finding 2 of" not in result.output, result.output
    findings = result.output.count("Nonconformance: pool/")
    assert result.output.count("Shrunk action sequence (0 actions)") <= findings
    assert (
        result.output.count("after construction: free count")
        + result.output.count("the same finding as")
        == findings
    )


def test_whose_fault_an_exception_is() -> None:
    def raise_in_test_code() -> None:
        raise KeyError("a pool's own bug")

    with pytest.raises(KeyError) as caught:
        raise_in_test_code()
    assert fault_of(caught.value) == "target"
    with pytest.raises(AttributeError) as refused:
        VllmApiTarget(IdsForBlocks, PoolConfig(4), SEED).apply(GetNewBlocks(1))
    assert fault_of(refused.value) == "mismatch"
    with pytest.raises(AttributeError) as ours:
        violation(None, GetNewBlocks(1))  # type: ignore[arg-type]
    assert fault_of(ours.value) == "suite"


def test_a_target_missing_protocol_methods_exits_2_naming_each() -> None:
    result = conform("--target", "surface_pools:half_target", "--machine", "pool")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "has no method view()" in result.output
    assert "has no method structure_problems()" in result.output
    assert "tutorial/adapter.md" in result.output
