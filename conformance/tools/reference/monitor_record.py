"""The monitor's benchmark figures of the docs, from ``docs/data/bench-monitor.json``.

The file keeps what ``kvpool bench --monitor --json`` printed (every run: contender, keys
held, events timed, CPU seconds, bytes per held key), with the command, commit, date and
machine of the run beside it; this module checks it and renders the table the bench page
shows: per keys held and contender, the events per second and the bytes per key, lowest
and highest over the runs, each computed here from what the runs printed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_record import BenchRecordError, record_field, span
from .markdown import code, table

SCHEMA = "kvpool-bench-monitor-record/1"
#: The report schema ``kvpool bench --monitor --json`` writes.
REPORT_SCHEMA = "kvpool-bench-monitor/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "bench-monitor.json"


@dataclass(frozen=True)
class Row:
    """One contender at one number of keys held, over every run."""

    contender: str
    keys_held: int
    events_per_second: tuple[float, ...]
    bytes_per_key: tuple[float, ...]


@dataclass(frozen=True)
class MonitorRecord:
    command: str
    commit: str
    date: str
    machine: str
    timed_events: int
    rows: tuple[Row, ...]


def parse(data: Any) -> MonitorRecord:
    """The record in ``data``; :class:`BenchRecordError` says what is wrong."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BenchRecordError(f"not a {SCHEMA} record")
    report = record_field(data, "report", dict, "record")
    if report.get("schema") != REPORT_SCHEMA:
        raise BenchRecordError(f"report: not a {REPORT_SCHEMA} report")
    cells: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for i, run in enumerate(record_field(report, "runs", list, "report")):
        where = f"report run {i}"
        if not isinstance(run, dict):
            raise BenchRecordError(f"{where}: not an object")
        contender = record_field(run, "contender", str, where)
        held = record_field(run, "keys_held", int, where)
        events = record_field(run, "timed_events", int, where)
        seconds = record_field(run, "seconds", float, where)
        memory = run.get("bytes_per_key")
        if seconds <= 0 or events <= 0 or not isinstance(memory, int | float):
            raise BenchRecordError(f"{where}: seconds, events or bytes_per_key out of range")
        cells.setdefault((held, contender), []).append((events / seconds, float(memory)))
    rows = tuple(
        Row(contender, held, tuple(r for r, _ in got), tuple(m for _, m in got))
        for (held, contender), got in sorted(cells.items())
    )
    if not rows:
        raise BenchRecordError("report: no runs")
    return MonitorRecord(
        command=record_field(data, "command", str, "record"),
        commit=record_field(data, "commit", str, "record"),
        date=record_field(data, "date", str, "record"),
        machine=record_field(data, "machine", str, "record"),
        timed_events=record_field(report, "timed_events", int, "report"),
        rows=rows,
    )


def load(docs_dir: Path) -> MonitorRecord:
    return parse(json.loads((docs_dir / DATA).read_text()))


def monitor_table(record: MonitorRecord) -> str:
    """The figures, then the line saying where they come from."""
    rows = [
        (
            code(r.contender),
            f"{r.keys_held:,}",
            span(r.events_per_second, 0),
            span(r.bytes_per_key, 0),
        )
        for r in record.rows
    ]
    runs = max(len(r.events_per_second) for r in record.rows)
    source = (
        f"{code(record.command)} at commit {code(record.commit)} on {record.date} "
        f"({record.machine}): {runs} run{'s' if runs != 1 else ''} per contender and size, "
        f"each in a fresh process, {record.timed_events:,} events timed per run; "
        "low\N{EN DASH}high over the runs."
    )
    headers = ("contender", "keys held", "events/s (CPU time)", "bytes per held key")
    return table(headers, rows) + "\n" + source + "\n"
