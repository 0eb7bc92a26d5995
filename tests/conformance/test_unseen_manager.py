"""A manager target for an engine the suite has never seen (``ledger_manager.py``, written
against ``kvpool.conformance.api`` and its docs page alone) runs with ``--manager`` and no
``--target``; its planted fault is caught by the request-level properties, and the trace
and the replay command name the manager."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)


def conform(manager: str, trace_dir: Path) -> Result:
    return CliRunner().invoke(
        main,
        [
            "conform",
            "--manager",
            manager,
            "--max-examples",
            "200",
            "--seed",
            "1",
            "--max-findings",
            "1",
            "--no-coverage",
            "--trace-dir",
            str(trace_dir),
        ],
    )


def test_the_ledger_manager_runs_alone_and_passes(tmp_path: Path) -> None:
    result = conform("ledger_manager:make", tmp_path / "traces")
    assert result.exit_code == 0, result.output
    assert "no --target: the requests machine checks manager ledger_manager:make" in result.output
    assert "requests/manager" in result.output and "pool/safety" not in result.output
    assert not (tmp_path / "traces").exists()


def test_its_planted_stale_key_is_caught_and_the_trace_names_the_manager(
    tmp_path: Path,
) -> None:
    result = conform("ledger_manager:make_stale", tmp_path / "traces")
    assert result.exit_code == 1, result.output
    assert "Nonconformance: requests/manager" in result.output
    assert "property 'hit-keys' broken" in result.output  # the suite's, not the target's
    traces = sorted((tmp_path / "traces").glob("*.itf.json"))
    assert [t.name for t in traces] == ["ledger_manager_make_stale-requests-manager-1.itf.json"]
    command = f"kvpool replay {traces[0]} --manager ledger_manager:make_stale"
    assert command in result.output.replace("\n", "")
    assert "--target" not in result.output.split("Reproduce with:")[1]
    replayed = CliRunner().invoke(
        main, ["replay", str(traces[0]), "--manager", "ledger_manager:make_stale"]
    )
    assert replayed.exit_code == 1, replayed.output
    sound = CliRunner().invoke(main, ["replay", str(traces[0]), "--manager", "ledger_manager:make"])
    assert sound.exit_code == 0, sound.output


def test_the_pool_machine_needs_a_pool(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["conform", "--manager", "ledger_manager:make", "--machine", "pool"]
    )
    assert result.exit_code == 2, result.output
    assert "name it with --target" in result.output
