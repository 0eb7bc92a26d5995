"""The monitor-soak page's tables: rendered from the soaks kept in
``docs/data/monitor-soak.json`` as ``.ci/soak-monitor`` printed them, never typed in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kvpool.conformance.tools.reference.fragments import DOCS
from kvpool.conformance.tools.reference.soak_record import (
    SoakRecordError,
    load,
    parse,
    read_output,
    soak_tables,
)

PRINTED = """\
`.ci/soak-monitor --seconds 10` at commit `a1fa461`, monitor on tcp://127.0.0.1 (2 cores)

| figure | value |
|---|---|
| messages sent | 51254 |
|   of which | heartbeat 5108, valid 23165 |
| exit status, traceback | 0, no |

monitor summary: events 12850, batches 16330, malformed 6871
"""


def _record() -> dict[str, Any]:
    return {
        "schema": "kvpool-monitor-soak-record/1",
        "date": "2026-12-07",
        "machine": "2 cores, x86_64, Python 3.11.7",
        "soaks": [read_output(PRINTED)],
    }


def test_what_the_script_printed_is_read_field_by_field() -> None:
    soak = read_output(PRINTED)
    assert soak["command"] == ".ci/soak-monitor --seconds 10"
    assert soak["commit"] == "a1fa461"
    assert soak["rows"][1] == ["of which", "heartbeat 5108, valid 23165"]
    assert soak["summary"] == "events 12850, batches 16330, malformed 6871"


def test_the_table_names_the_command_commit_and_machine() -> None:
    shown = soak_tables(parse(_record()))
    assert "`.ci/soak-monitor --seconds 10` at commit `a1fa461`, on 2026-12-07" in shown
    assert "| messages sent | 51254 |" in shown
    assert "monitor summary: events 12850" in shown


def test_the_committed_record_renders() -> None:
    record = load(DOCS)
    shown = soak_tables(record)
    assert all(soak.command.startswith(".ci/soak-monitor") for soak in record.soaks)
    assert shown.count("| figure | value |") == len(record.soaks)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("schema",), "other/1", "not a kvpool-monitor-soak-record/1 record"),
        (("soaks",), [], "record: no soaks"),
        (("date",), True, "record: 'date' must be a str, not True"),
        (("soaks", 0, "commit"), 7, "soak 0: 'commit' must be a str, not 7"),
        (("soaks", 0, "rows"), [["a", 1]], r"soak 0: row 0 must be a \[figure, value\] pair"),
        (("soaks", 0, "rows"), [], "soak 0: no rows"),
    ],
)
def test_a_malformed_record_is_refused_naming_where(
    path: tuple[Any, ...], value: object, message: str
) -> None:
    data = copy.deepcopy(_record())
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(SoakRecordError, match=message):
        parse(data)


def test_output_without_its_table_is_refused() -> None:
    with pytest.raises(SoakRecordError, match="no table or no summary line"):
        read_output(PRINTED.split("| figure")[0])
    with pytest.raises(SoakRecordError, match="no '`COMMAND` at commit `C`' line"):
        read_output("nothing printed")
