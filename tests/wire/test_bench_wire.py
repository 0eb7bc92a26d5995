"""``kvpool bench --wire`` times the same lockstep runs in process and over the protocol,
and says so when the two sides did not run the same steps."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.wire import bench


def test_the_report_has_both_clocks_and_the_same_steps_on_both_sides() -> None:
    report = bench.run_wire_bench("impl", examples=3, repeat=2, seed=1)
    assert report["replay"]["traces"] > 100  # the seed profile's vectors
    for part in (report, report["replay"]):
        assert part["same_steps"] is True
        assert part["steps"] > 0
        for clock in ("cpu", "wall"):
            row = part[clock]
            assert row["in_process_steps_per_s"] > 0 and row["wire_steps_per_s"] > 0
            assert row["ratio_min"] <= row["ratio_median"] <= row["ratio_max"]


def test_the_command_prints_the_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    measure = bench.run_wire_bench

    def smaller(target: str, examples: int, repeat: int, seed: int) -> dict[str, Any]:
        asked.append((target, examples, repeat, seed))
        return measure(target, 2, 1, seed)  # the same runs, fewer of them

    monkeypatch.setattr(bench, "run_wire_bench", smaller)
    printed = CliRunner().invoke(main, ["bench", "--wire", "--quick"])
    assert printed.exit_code == 0, printed.output
    assert (
        "wire / in process" in printed.output and "aim: wire / in process >= 0.5" in printed.output
    )
    assert "search CPU" in printed.output and "replay CPU" in printed.output
    as_json = CliRunner().invoke(main, ["bench", "--wire", "--quick", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output)["cpu"]["ratio_median"] > 0
    assert asked == [("impl", 20, 3, 0)] * 2
