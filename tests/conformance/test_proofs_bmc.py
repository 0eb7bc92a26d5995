"""``kvpool prove --bmc``: the shortest counterexample of a planted fault becomes a trace
file that diverges on the faulty pool and conforms on ``impl``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.tools.proofs.bmc import search
from kvpool.conformance.tools.proofs.command import prove
from kvpool.conformance.tools.proofs.counterexample import write_counterexample
from kvpool.conformance.trace.files import read_trace
from kvpool.conformance.trace.replay import replay_file

HERE = Path(__file__).parent

#: fault -> the depth of its shortest counterexample on 4 blocks
SHALLOW = {
    "DoubleFreeAccepted": 1,
    "ResetWhileHeld": 2,
    "CachedToFront": 3,
    "TouchForgetsQueue": 4,
    "StaleKeyAfterReuse": 4,
}


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


@pytest.mark.parametrize("fault", sorted(SHALLOW))
def test_bmc_trace_diverges_on_the_faulty_pool_and_conforms_on_impl(
    fault: str, tmp_path: Path
) -> None:
    result = search(fault, blocks=4, depth=SHALLOW[fault])
    assert result.found and result.depth_reached == SHALLOW[fault]
    path = write_counterexample(result, tmp_path / f"{fault}.itf.json")
    trace = read_trace(path)
    assert trace.meta.target == f"faulty_pools:{fault}"
    assert len(trace.actions) == SHALLOW[fault]
    on_faulty = replay_file(path, trace.meta.target)
    assert not on_faulty.conforms and on_faulty.step == SHALLOW[fault], on_faulty.describe()
    on_impl = replay_file(path, "impl")
    assert on_impl.conforms, on_impl.describe()


def test_bmc_finds_no_shorter_run_than_the_shortest() -> None:
    result = search("CachedToFront", blocks=4, depth=2)
    assert not result.found and result.depth_reached == 2


def test_bmc_without_fault_finds_no_violation_at_small_depth() -> None:
    result = search(None, blocks=3, depth=3)
    assert not result.found and not result.unknown and result.depth_reached == 3


def test_cli_writes_a_counterexample_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "cx.itf.json"
    result = CliRunner().invoke(
        prove,
        ["--bmc", "--blocks", "4", "--depth", "4", "--fault", "ResetWhileHeld", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert out.exists() and "found" in result.output and "kvpool replay" in result.output


def test_cli_is_undecided_when_the_fault_is_deeper_than_the_depth(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        prove,
        ["--bmc", "--depth", "1", "--fault", "CachedToFront", "--out", str(tmp_path / "x.json")],
    )
    assert result.exit_code == 5, result.output  # the planted fault not found: undecided
    assert "no run of up to 1 steps" in result.output


@pytest.mark.parametrize(
    "args",
    [["--bmc", "--fault", "NoSuchFault"], ["--fault", "CachedToFront"], ["--blocks", "1"]],
)
def test_cli_usage_errors_exit_2(args: list[str]) -> None:
    assert CliRunner().invoke(prove, args).exit_code == 2


def test_cli_proves_everything_and_lists_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # names whole in their cells (80 folds them)
    result = CliRunner().invoke(prove, [])
    assert result.exit_code == 0, result.output
    assert "every obligation proved" in result.output
    assert "lemma" in result.output and "NOT encoded" not in result.output
    assert "concat-count lemma" in result.output and "refs-holders:cow-swap" in result.output
    listing = CliRunner().invoke(prove, ["--list-faults"])
    assert listing.exit_code == 0 and "TouchForgetsQueue" in listing.output
