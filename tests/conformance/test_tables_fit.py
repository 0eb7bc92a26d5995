"""The tables ``kvpool conform`` and ``kvpool targets`` print fit an 80-column terminal:
no line is wider, and nothing is cut (no ellipsis). Where the wide layout does not fit,
the same facts are stacked (conform's results) or turned round (targets' actions)."""

from __future__ import annotations

import io

import pytest
from click.testing import CliRunner
from kvpool.conformance.report import RESULTS_COLUMNS, ResultsTable
from kvpool.conformance.targets.actions_table import ActionsTable, Described
from kvpool.conformance.tools.conform.command import conform
from rich.console import Console
from rich.table import Table

WIDTH = 80


def rendered(renderable: object, width: int = WIDTH) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


def overflows(text: str, width: int = WIDTH) -> list[str]:
    """The lines of ``text`` wider than ``width``, or cut (an ellipsis)."""
    return [line for line in text.splitlines() if len(line) > width or "…" in line]


def results(*runs: str) -> ResultsTable:
    row = dict.fromkeys(RESULTS_COLUMNS, "22,387")
    rows = [{**row, "run": run, "result": "TOO FEW VALID", "time": "67.4s"} for run in runs]
    return ResultsTable("kvpool conform — target vllm==0.33.0, profile vllm-0.30", rows)


def test_the_checker_catches_a_wide_line_and_a_cut_cell() -> None:
    wide = rendered(results("pool/events (count)"), width=140)  # the one-table layout
    assert max(len(line) for line in wide.splitlines()) > WIDTH
    assert overflows(wide)
    cut = Table()
    cut.add_column("name", no_wrap=True)
    cut.add_row("requests/manager " * 8)
    assert any("…" in line for line in overflows(rendered(cut)))


def test_the_results_table_stacks_at_80_columns_and_cuts_nothing() -> None:
    text = rendered(results("pool/events (count)", "requests/manager"))
    assert overflows(text) == []
    for word in (*RESULTS_COLUMNS, "pool/events (count)", "requests/manager", "TOO FEW VALID"):
        assert word in text
    assert text.count("pool/events (count)") == 2  # each half names its runs


def test_the_results_table_stays_one_table_where_it_fits() -> None:
    text = rendered(results("pool/safety"), width=140)
    assert text.count("pool/safety") == 1
    assert "steps/s" in text.splitlines()[2] and "rejected" in text.splitlines()[2]


def test_the_actions_table_turns_round_at_80_columns_and_cuts_nothing() -> None:
    rows = (("get_new_blocks", "get_new_blocks"), ("free_blocks(evict_first)", "evict"))
    releases = [
        Described(f"vllm==0.{n}.0", f"0.{n}.0", "vllm-0.30", frozenset({"get_new_blocks"}))
        for n in range(10, 30)
    ]
    targets = (*releases, Described("nanovllm-fork==20260210", "", "", "unavailable: no wheel"))
    text = rendered(ActionsTable(targets, rows))
    assert overflows(text) == []
    for target in targets:
        assert target.name in text
    assert "free_blocks(evict_first)" in text and "? (unavailable" in text
    few = rendered(ActionsTable(targets[:2], rows))  # two targets: the matrix fits
    assert "yes" in few and overflows(few) == []


def test_a_real_conform_run_fits_80_columns() -> None:
    result = CliRunner(env={"COLUMNS": str(WIDTH)}).invoke(
        conform, ["--target", "impl", "--max-examples", "3", "--seed", "1"]
    )
    assert result.exit_code == 0, result.output
    tables = [line for line in result.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert tables
    assert overflows("\n".join(tables)) == []


def test_kvpool_proves_tables_fit_80_columns_and_cut_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvpool.conformance.cli import main

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    listed = CliRunner().invoke(main, ["prove", "--list-faults"])
    assert listed.exit_code == 0, listed.output
    assert overflows(listed.output) == []
    assert "DoubleFree" in listed.output  # a fault's name, folded within its cell
    proved = CliRunner().invoke(main, ["prove"])
    assert proved.exit_code == 0, proved.output
    assert overflows(proved.output) == []
    assert "every obligation proved" in proved.output
