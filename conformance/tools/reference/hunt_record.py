"""The hunt's figures of the docs, from ``docs/data/hunt.json``.

The file keeps the result tables ``kvpool conform --seed N`` printed, seed by seed and
target by target, with each run's CPU and wall-clock seconds and the machine's load
before it, and the commit, date and machine of the runs (``.ci/hunt-record`` writes it).
This module checks it and renders the levels page's table of steps per CPU second: per
run of the result table and per target, the lowest, highest and median over the seeds,
computed here, never typed in.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_record import record_field
from .markdown import code, table

SCHEMA = "kvpool-hunt-record/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "hunt.json"


class HuntRecordError(ValueError):
    """The record is malformed or inconsistent (its message says where)."""


@dataclass(frozen=True)
class Row:
    """One row of a result table: the run (``pool/safety``), its result, its steps and
    its steps per CPU second of exploring."""

    run: str
    result: str
    steps: int
    steps_per_second: int


@dataclass(frozen=True)
class SeedRun:
    """One ``kvpool conform`` run: its seed, its rows, its CPU and wall seconds and the
    one-minute load average before it started."""

    seed: int
    rows: tuple[Row, ...]
    cpu_seconds: float
    wall_seconds: float
    load_before: float


@dataclass(frozen=True)
class TargetRuns:
    target: str
    command: str
    runs: tuple[SeedRun, ...]


@dataclass(frozen=True)
class HuntRecord:
    commit: str
    date: str
    machine: str
    targets: tuple[TargetRuns, ...]


def _field(data: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    return record_field(data, name, kind, where, HuntRecordError)


def _non_negative(data: Any, name: str, where: str) -> float:
    value = float(_field(data, name, (int, float), where))
    if not value >= 0:  # NaN too
        raise HuntRecordError(f"{where}: {name!r} must be >= 0, not {value!r}")
    return value


def _row(data: Any, where: str) -> Row:
    steps = _field(data, "steps", int, where)
    rate = _field(data, "steps_per_second", int, where)
    if steps < 0 or rate < 0:
        raise HuntRecordError(f"{where}: steps and steps_per_second must be >= 0")
    return Row(_field(data, "run", str, where), _field(data, "result", str, where), steps, rate)


def _seed_run(data: Any, where: str) -> SeedRun:
    rows = tuple(
        _row(r, f"{where}, row {i}") for i, r in enumerate(_field(data, "rows", list, where))
    )
    if not rows:
        raise HuntRecordError(f"{where}: no rows")
    if len({r.run for r in rows}) != len(rows):
        raise HuntRecordError(f"{where}: a run is listed twice")
    return SeedRun(
        _field(data, "seed", int, where),
        rows,
        _non_negative(data, "cpu_seconds", where),
        _non_negative(data, "wall_seconds", where),
        _non_negative(data, "load_before", where),
    )


def parse(data: Any) -> HuntRecord:
    """The record in ``data`` (a parsed JSON value); :class:`HuntRecordError` otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise HuntRecordError(f"not a {SCHEMA} record")
    targets = []
    for t, entry in enumerate(_field(data, "targets", list, "record")):
        where = f"target {t}"
        runs = tuple(
            _seed_run(r, f"{where}, run {i}")
            for i, r in enumerate(_field(entry, "runs", list, where))
        )
        if not runs:
            raise HuntRecordError(f"{where}: no runs")
        if len({r.seed for r in runs}) != len(runs):
            raise HuntRecordError(f"{where}: a seed is run twice")
        if len({tuple(row.run for row in r.rows) for r in runs}) != 1:
            raise HuntRecordError(f"{where}: the seeds' result tables have different runs")
        targets.append(
            TargetRuns(
                _field(entry, "target", str, where), _field(entry, "command", str, where), runs
            )
        )
    if not targets:
        raise HuntRecordError("record: no targets")
    return HuntRecord(
        _field(data, "commit", str, "record"),
        _field(data, "date", str, "record"),
        _field(data, "machine", str, "record"),
        tuple(targets),
    )


def load(docs_dir: Path) -> HuntRecord:
    return parse(json.loads((docs_dir / DATA).read_text()))


def spread(values: list[float]) -> str:
    """``low`` to ``high`` (and the median) of ``values``, rounded to whole numbers."""
    low, high, median = min(values), max(values), statistics.median(values)
    if low == high:
        return f"{low:,.0f}"
    return f"{low:,.0f}\N{EN DASH}{high:,.0f} (median {median:,.0f})"


def _spread_s(values: list[float], digits: int = 2) -> str:
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}\N{EN DASH}{high}"


def rates_table(record: HuntRecord) -> str:
    """Steps per CPU second per run (rows) and target (columns), then the runs' time and
    load and the line saying where the figures come from."""
    runs: list[str] = []
    for target in record.targets:
        for row in target.runs[0].rows:
            if row.run not in runs:
                runs.append(row.run)
    rows = []
    for run in runs:
        cells = [code(run)]
        for target in record.targets:
            rates = [
                float(row.steps_per_second)
                for seed_run in target.runs
                for row in seed_run.rows
                if row.run == run
            ]
            cells.append(spread(rates) if rates else "not run")
        rows.append(cells)
    headers = ["run", *(f"{code(t.target)} steps/s" for t in record.targets)]
    lines = [table(headers, rows)]
    for target in record.targets:
        seeds = [r.seed for r in target.runs]
        failed = sorted({row.run for r in target.runs for row in r.rows if row.result != "pass"})
        loads = [r.load_before for r in target.runs]
        lines.append(
            f"- {code(target.command)} for N = {', '.join(map(str, seeds))}: "
            f"{_spread_s([r.cpu_seconds for r in target.runs])} s of CPU, "
            f"{_spread_s([r.wall_seconds for r in target.runs])} s of wall-clock time per "
            f"run; one-minute load before each run {_spread_s(loads, 1)}"
            + (
                f"; {', '.join(map(code, failed))} end with the target's known findings"
                if failed
                else ""
            )
            + "."
        )
    lines.append(
        f"\nAt commit {code(record.commit)} on {record.date} ({record.machine}), "
        "the runs one after another; each figure is the result table's `steps/s` (lockstep "
        "actions per CPU second of exploring), low\N{EN DASH}high and median over the seeds."
    )
    return "\n".join(lines) + "\n"
