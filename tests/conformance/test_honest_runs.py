"""Runs that stay honest: valid and rejected test cases counted and shown, a floor on the
valid ones, ``--fail-fast`` ending the whole command, the null block's count compared where
the profile keeps it still, and the null block cached reported as a finding."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from honest_pools import OnlyAWrongFreeCount  # pytest puts this folder on sys.path
from kvpool.conformance.cli import main
from kvpool.conformance.engines.builtin.spec_target import view_of
from kvpool.conformance.machines.pool.compare import compare_views
from kvpool.conformance.machines.pool.levels import ORDER, SAFETY
from kvpool.conformance.machines.pool.lockstep import RunRecord
from kvpool.conformance.machines.pool.runner import LevelResult, run_level
from kvpool.conformance.targets.loading import load_target
from kvpool.spec import SEED, PoolConfig, Profile, get_profile, initial_state
from kvpool.spec.profile import PROFILES

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)  # failures write their traces here


def conform(*args: str) -> Result:
    # wide: the rows are read as one table (at 80 columns it is stacked in two)
    return CliRunner(env={"COLUMNS": "200"}).invoke(main, ["conform", "--no-coverage", *args])


def row(output: str, label: str) -> list[str]:
    """The cells of the result table's row for run ``label``."""
    for line in output.splitlines():
        cells = [c.strip() for c in re.split("[│┃]", line.strip("│┃ "))]
        if cells and cells[0] == label:
            return cells
    raise AssertionError(f"no row {label!r} in:\n{output}")


# --- valid and rejected test cases, and the floor --------------------------------------


def rejecting_run(min_valid: int, seed: int) -> object:
    return run_level(
        OnlyAWrongFreeCount,
        SEED,
        SAFETY,
        max_examples=30,
        steps=10,
        seed=seed,
        max_blocks=4,
        max_findings=2,
        min_valid=min_valid,
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_run_whose_test_cases_are_all_rejected_fails_its_floor(seed: int) -> None:
    result = rejecting_run(15, seed)
    assert len(result.failures) == 1  # type: ignore[attr-defined]
    record = result.record  # type: ignore[attr-defined]
    assert record.rejected > 100, record.rejected
    assert record.searched is not None and record.searched < 15
    message = result.too_few_valid  # type: ignore[attr-defined]
    assert message is not None
    assert message.startswith(
        f"pool/safety looked for further findings on only {record.searched} valid test "
        "case(s), fewer than the floor of 15 (--min-valid): "
        f"{record.rejected} were dropped because they ran into a finding already reported"
    ), message
    assert not result.passed  # type: ignore[attr-defined]
    without_floor = rejecting_run(0, seed)
    assert without_floor.too_few_valid is None  # type: ignore[attr-defined]


def test_a_clean_run_meets_its_floor_with_every_test_case_valid() -> None:
    factory, _ = load_target("impl")
    result = run_level(
        factory, SEED, SAFETY, max_examples=25, steps=20, seed=4, max_blocks=6, min_valid=25
    )
    assert result.passed, result.too_few_valid
    # the drawn test cases; the end-of-run sweep's witnesses are valid test cases too
    assert result.record.searched == 25
    assert result.valid == 25 + result.record.swept
    assert result.record.rejected == 0


def test_the_floor_fails_the_command_with_a_clear_message() -> None:
    args = ("--target", "honest_pools:OnlyAWrongFreeCount", "--machine", "pool")
    args += ("--level", "safety", "-n", "30", "--max-findings", "2", "--seed", "1")
    result = conform(*args)
    assert result.exit_code == 1, result.output
    assert "Too few valid test cases: pool/safety" in result.output
    assert "fewer than the floor of 15 (--min-valid)" in result.output
    cells = row(result.output, "pool/safety")
    assert cells[1] == "FAIL" and int(cells[3]) > 100  # rejected
    lenient = conform(*args, "--min-valid", "0")
    assert lenient.exit_code == 1, lenient.output
    assert "Too few valid" not in lenient.output


def test_the_result_table_shows_valid_rejected_skipped_and_steps_per_second() -> None:
    result = conform(
        "--machine", "pool,requests", "--level", "robustness", "-n", "20", "--seed", "2"
    )
    assert result.exit_code == 0, result.output
    header = row(result.output, "run")
    assert header[:8] == [
        "run",
        "result",
        "valid",
        "rejected",
        "skipped",
        "steps",
        "steps/s",
        "ops",
    ]
    for label in ("pool/robustness", "requests/pool", "requests/manager"):
        cells = row(result.output, label)
        assert cells[1] == "pass" and cells[3] == "0", cells
        # the pool run adds the end-of-run sweep's witnesses to its 20 drawn test cases
        valid = int(cells[2])
        assert valid >= 20 if label.startswith("pool/") else valid == 20, cells
        assert int(cells[5]) > 0 and int(cells[6].replace(",", "")) > 0, cells
    # robustness draws broken rules that cannot be broken in some states: skipped, shown
    assert int(row(result.output, "pool/robustness")[4]) > 0


# --- fail fast --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stop", [("--max-findings", "1"), ("--fail-fast",)], ids=["max-findings-1", "fail-fast"]
)
def test_the_first_finding_ends_the_command(stop: tuple[str, ...]) -> None:
    target = ("--target", "honest_pools:TouchForgetsItsCount")
    result = conform(*target, "-n", "60", "--seed", "3", *stop)
    assert result.exit_code == 1, result.output
    assert "Nonconformance: pool/safety" in result.output
    # found at safety: nothing after it ran
    not_run = "".join(result.output.split("not run: ", 1)[1].split("\n\n")[0].split("\n"))
    assert not_run == "pool/order, pool/robustness, requests/pool"
    for later in ("pool/order", "pool/robustness", "requests/pool"):
        with pytest.raises(AssertionError):
            row(result.output, later)
    assert list(Path("kvpool-traces").glob("*.itf.json")), "the finding's trace is written"
    assert "Shrunk action sequence (2 actions)" in result.output


def test_without_fail_fast_the_later_runs_still_run() -> None:
    result = conform(
        "--target",
        "honest_pools:TouchForgetsItsCount",
        "-n",
        "20",
        "--max-findings",
        "2",
        "--seed",
        "3",
    )
    assert result.exit_code == 1, result.output
    assert "not run" not in result.output
    for later in ("pool/order", "pool/robustness", "requests/pool"):
        assert row(result.output, later)[1] in ("pass", "FAIL", "FAIL (2)")  # it ran


# --- the null block's count ---------------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_null_blocks_count_is_compared_where_the_profile_keeps_it_still(
    profile: str,
) -> None:
    chosen: Profile = get_profile(profile)
    state = initial_state(PoolConfig(4), chosen)
    moved = view_of(state)
    assert moved.ref_cnt is not None
    moved = moved.__class__(**{**moved.__dict__, "ref_cnt": (-1, *moved.ref_cnt[1:])})
    problems = compare_views(state, moved, exact_order=True)
    if chosen.null_ref_cnt_moves:
        assert problems == []
    else:
        assert problems == ["block 0: ref_cnt expected 0, got -1"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_pool_counting_the_null_block_down_fails_where_the_profile_keeps_it_still(
    seed: int,
) -> None:
    args = ("--target", "honest_pools:NullCountedOnFree", "--machine", "pool")
    args += ("--level", "safety", "--max-findings", "1", "--seed", str(seed))
    caught = conform(*args, "--profile", "seed")
    assert caught.exit_code == 1, caught.output
    assert "block 0: ref_cnt expected 0, got -1" in caught.output
    # vLLM 0.32's profile says freeing the null block counts it down: no finding
    assert conform(*args, "--profile", "vllm-0.32").exit_code == 0


# --- the null block cached: a finding of the pools that do it ------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_vllm_0_10_caching_the_null_block_is_a_finding_at_safety(seed: int) -> None:
    factory, _ = load_target("vllm==0.10.2")
    result = run_level(
        factory,
        get_profile("vllm-0.10"),
        SAFETY,
        max_examples=100,
        steps=30,
        seed=seed,
        max_blocks=8,
        max_findings=3,
        shrink_seconds=2.0,
    )
    messages = [f.message for f in result.failures]
    assert any(
        re.match(
            r"after cache_full_blocks: the null block was cached \(invariant "
            r"'null-block-inert': a lookup of its key hands it out as a cache hit\): "
            r"block 0: keys expected \[\], got \['[0-9a-f]+'\]",
            m,
        )
        for m in messages
    ), messages


# --- the seeded search ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_seeded_search_finds_an_order_fault_on_every_seed_and_again_on_replay(
    seed: int,
) -> None:
    factory, _ = load_target("faulty_pools:CachedToFront")
    runs = [
        run_level(factory, SEED, ORDER, max_examples=150, steps=40, seed=seed, max_blocks=8)
        for _ in range(2)
    ]
    first, again = (r.failure for r in runs)
    assert first is not None and "free queue order" in first.message, first
    assert again == first  # the same seed, the same finding and trace
    assert runs[0].label == "pool/order"


def test_the_seeded_search_on_a_conforming_pool_counts_its_test_cases() -> None:
    factory, _ = load_target("impl")
    result = run_level(factory, SEED, SAFETY, max_examples=60, steps=30, seed=9, max_blocks=8)
    assert result.passed
    # every case ran its 30 draws; the sweep may add witnesses for cells the draws missed
    assert result.valid == 60 + result.record.swept
    assert result.record.steps >= 60 * 30 - result.record.skipped
    assert result.steps_per_second > 0


def test_a_passing_run_under_its_floor_exits_3(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rejections are not the only way to fall short: Hypothesis also drops test cases that
    run out of choices, and a case that ran no action checked nothing."""
    from kvpool.conformance.tools.conform import run as conform_run

    def starved(*args: object, **kwargs: object) -> LevelResult:
        record = RunRecord(examples=40, valid=3, searched=3, steps=3)
        return LevelResult(SAFETY, record, 0.1, (), min_valid=int(kwargs["min_valid"]))  # type: ignore[call-overload]

    monkeypatch.setattr(conform_run, "run_level", starved)
    result = conform("--machine", "pool", "--level", "safety", "-n", "40")
    assert result.exit_code == 3, result.output
    assert "TOO FEW VALID" in result.output
    assert (
        "pool/safety ran only 3 valid test case(s), fewer than the floor of 20 (--min-valid)"
        in result.output
    )
    assert "every run passed" not in result.output
