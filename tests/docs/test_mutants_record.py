"""The scoring page's `kvpool mutants` figures: read from the runs' record, never typed in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kvpool.conformance.tools.reference.fragments import DOCS, expand
from kvpool.conformance.tools.reference.mutants_record import (
    MutantsRecordError,
    load,
    parse,
    read_output,
    record_table,
)

OUTPUT = """the unmutated pool passes every level (1.5s)

 ... the table ...
39 of 39 killed; time to kill median 0.07s, max 0.9s; shrunk trace median 4 actions
"""


def _run(seed: int, killed: int = 39) -> dict[str, Any]:
    figures: dict[str, Any] = dict(read_output(seed, OUTPUT))
    figures.update(killed=killed, cpu_seconds=8.5, wall_seconds=9.8, load_before=0.4)
    return figures


def _record() -> dict[str, Any]:
    return {
        "schema": "kvpool-mutants-record/1",
        "commit": "abc1234",
        "date": "2026-12-07",
        "machine": "2 cores",
        "runs": [_run(1), _run(2, killed=38)],
    }


def test_the_printed_summary_is_read() -> None:
    assert read_output(3, OUTPUT) == {
        "seed": 3,
        "killed": 39,
        "mutants": 39,
        "median_kill_seconds": 0.07,
        "slowest_kill_seconds": 0.9,
        "median_trace_actions": 4.0,
        "clean_seconds": 1.5,
    }


def test_an_output_without_a_summary_is_refused() -> None:
    with pytest.raises(MutantsRecordError, match="seed 1: no summary line"):
        read_output(1, "the unmutated pool passes every level (1.5s)\n")


def test_the_table_shows_each_seed_as_recorded() -> None:
    shown = record_table(parse(_record()))
    assert "| 1 (default) | 39 of 39 | 0.07 s | 0.9 s | 4 actions | 1.5 s |" in shown
    assert "| 2 | 38 of 39 |" in shown
    assert "`kvpool mutants --seed N -j 1` at commit `abc1234` on 2026-12-07" in shown


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema="other"), "not a kvpool-mutants-record/1 record"),
        (lambda d: d["runs"].clear(), "no runs"),
        (lambda d: d["runs"][1].update(seed=1), "a seed is run twice"),
        (lambda d: d["runs"][0].update(killed=40), "40 killed of 39 mutants"),
        (lambda d: d["runs"][0].update(cpu_seconds=float("nan")), "'cpu_seconds' must be"),
        (lambda d: d["runs"][0].pop("wall_seconds"), "'wall_seconds' must be a"),
        (lambda d: d.update(commit=7), "'commit' must be a str, not 7"),
    ],
)
def test_a_malformed_record_is_refused(change: Any, message: str) -> None:
    data = copy.deepcopy(_record())
    change(data)
    with pytest.raises(MutantsRecordError, match=message):
        parse(data)


def test_the_scoring_page_renders_the_committed_record() -> None:
    page = (DOCS / "guide" / "scoring.md").read_text(encoding="utf-8")
    assert "<!-- kvpool:mutants-record -->" in page
    shown = expand(page, "guide/scoring.md")
    record = load(DOCS)
    assert record_table(record) in shown + "\n"
    for run in record.runs:
        assert f"{run.killed} of {run.mutants}" in shown
