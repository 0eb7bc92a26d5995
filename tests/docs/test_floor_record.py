"""The bench page's floor table: rendered from the run of
``python -m kvpool.conformance.tools.bench.floor`` kept in ``docs/data/bench-floor.json``, as it
printed it, never typed in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kvpool.conformance.tools.reference.floor_record import (
    FloorRecordError,
    floor_table,
    load,
    parse,
    read_table,
)
from kvpool.conformance.tools.reference.fragments import DOCS

PRINTED = (
    "| workload | blocks | ours µs/call | vllm 0.33.0 µs/call | floor µs/call | vLLM / ours "
    "| vLLM / floor |\n"
    "|---|---|---|---|---|---|---|\n"
    "| churn | 1,000 | 1.834 | 4.415 | 1.274 | 2.41 | 3.46 |\n"
    "| prefix-hit | 1,000 | 0.941 | 1.307 | 0.822 | 1.39 | 1.59 |\n"
)


def _record() -> dict[str, Any]:
    header, rows = read_table(PRINTED)
    return {
        "schema": "kvpool-bench-floor-record/1",
        "command": "python -m kvpool.conformance.tools.bench.floor --sizes 1000",
        "commit": "abc1234",
        "date": "2026-12-07",
        "machine": "2 cores, x86_64, Python 3.11.7",
        "load_before": 3.5,
        "header": header,
        "rows": rows,
    }


def test_the_table_is_what_the_command_printed_with_where_it_comes_from() -> None:
    shown = floor_table(parse(_record()))
    assert "| churn | 1,000 | 1.834 | 4.415 | 1.274 | 2.41 | 3.46 |" in shown
    assert (
        "`python -m kvpool.conformance.tools.bench.floor --sizes 1000` at commit `abc1234`" in shown
    )
    assert "one-minute load 3.5 before the run" in shown


def test_the_committed_record_renders() -> None:
    record = load(DOCS)
    assert record.command.startswith("python -m kvpool.conformance.tools.bench.floor")
    assert record.header[:2] == ("workload", "blocks")
    lines = floor_table(record).splitlines()
    assert sum(line.startswith("| ") for line in lines) == len(record.rows) + 1


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("schema", "x/1", "not a kvpool-bench-floor-record/1 record"),
        ("rows", [], "record: no rows"),
        ("rows", [["churn"]], "a row does not have the header's 7 cells"),
        ("rows", [[1, 2, 3, 4, 5, 6, 7]], "row 0: 'row' must be a non-empty list of strings"),
        ("load_before", float("nan"), "'load_before' must be a number >= 0"),
        ("commit", None, "record: 'commit' must be a str, not None"),
        ("load_before", True, "'load_before' must be a int or float, not True"),
    ],
)
def test_a_malformed_record_is_refused_naming_where(
    field: str, value: object, message: str
) -> None:
    data = copy.deepcopy(_record())
    data[field] = value
    with pytest.raises(FloorRecordError, match=message):
        parse(data)


def test_output_without_a_table_is_refused() -> None:
    with pytest.raises(FloorRecordError, match="no table"):
        read_table("(no compiled build: mypy missing)\n")
