"""The request machine end to end: our pool and manager pass, every planted request-level
fault is caught by the property it breaks, and ``kvpool workload`` runs a serving load."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from faulty_managers import CAUGHT_BY as FAULTS  # pytest puts this folder on sys.path
from kvpool.conformance.cli import main

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)  # failures write their traces here


def requests(*args: str) -> Result:
    return CliRunner().invoke(
        main, ["conform", "--machine", "requests", "--no-coverage", "--max-findings", "1", *args]
    )


def test_impl_pool_and_manager_pass_the_request_machine() -> None:
    result = requests("--max-examples", "80", "--seed", "4")
    assert result.exit_code == 0, result.output
    assert "requests/pool" in result.output and "requests/manager" in result.output
    # the properties table names what was checked, with nonzero counts
    for name in ("append-only", "append-only-up-to-null", "write-guard", "hit-keys"):
        line = next(ln for ln in result.output.splitlines() if f" {name} " in ln)
        counts = [int(w) for w in line.replace("│", " ").split() if w.isdigit()]
        assert counts and all(c > 0 for c in counts), line


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_planted_manager_fault_is_caught(fault: str) -> None:
    result = requests(
        "--manager", f"faulty_managers:make_{fault}", "--max-examples", "150", "--seed", "1"
    )
    assert result.exit_code == 1, result.output
    assert "Nonconformance: requests/manager" in result.output
    assert FAULTS[fault] in result.output
    assert "Shrunk action sequence" in result.output
    assert "admit(" in result.output
    assert "--machine requests --manager faulty_managers:make_" in result.output


def test_a_faulty_pool_is_caught_by_realistic_request_sequences() -> None:
    result = requests(
        "--target",
        "faulty_pools:StaleKeyAfterReuse",
        "--manager",
        "none",
        "--max-examples",
        "200",
        "--seed",
        "2",
    )
    assert result.exit_code == 1, result.output
    assert "Nonconformance: requests/pool" in result.output


def test_a_manager_factory_that_cannot_build_exits_2() -> None:
    result = requests("--manager", "faulty_managers:_target")
    assert result.exit_code == 2, result.output
    assert "could not be built" in result.output


def workload(*args: str) -> Result:
    return CliRunner().invoke(main, ["workload", "--requests", "40", "--blocks", "48", *args])


def test_workload_passes_on_pool_and_manager_and_is_deterministic() -> None:
    first, second = workload("--seed", "3"), workload("--seed", "3")
    assert first.exit_code == 0, first.output
    assert "requests/pool" in first.output and "requests/manager" in first.output
    assert first.output == second.output
    assert workload("--seed", "4").output != first.output


def test_workload_with_a_sliding_window_group() -> None:
    result = workload("--groups", "full,sliding:2", "--seed", "1")
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if " append-only-up-to-null " in ln)
    assert any(w.isdigit() and int(w) > 0 for w in line.replace("│", " ").split())


def test_workload_catches_a_faulty_manager() -> None:
    result = workload("--manager", "faulty_managers:make_HeadFirstFree", "--seed", "0")
    assert result.exit_code == 1, result.output
    assert "tail-first-free" in result.output
    assert "last actions" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--groups", "full,ring"], "--groups takes"),
        (["--prompt-tokens", "9-3"], "MIN <= MAX"),
        (["--output-tokens", "lots"], "MIN-MAX"),
        (["--block-size", "5", "--hash-block-size", "2"], "multiple of --hash-block-size"),
        (["--blocks", "3"], "cannot fit in an empty pool"),
    ],
)
def test_workload_bad_options_are_explained(args: list[str], message: str) -> None:
    result = workload(*args)
    assert result.exit_code in (1, 2), result.output
    assert message in result.output
