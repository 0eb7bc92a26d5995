"""The managers' benchmark figures of the docs, from ``docs/data/bench-managers.json``.

The file keeps what ``kvpool bench --manager vllm --json`` printed, run by run, with the
command, the commit and the date of the runs beside it; this module checks it and renders
the table the bench page shows. Every figure is computed here from the runs' seconds,
never typed in: per (workload, size), each run's median steps per second for each
manager, the median of its per-repetition ratios, and the ratio of each manager's fastest
repetition, with the lowest and highest of those over the runs.

Why both ratios: on these machines a repetition's CPU time varies with what the memory
system does outside the process (on an idle machine a memory-bound loop's CPU time moves
by half from one repetition to the next, a loop of arithmetic by 3%), and that noise only
ever adds time. The median of the per-repetition ratios cancels drift between
repetitions but not a slow repetition of one side; the fastest repetitions are the ones
least disturbed.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .markdown import code, table

SCHEMA = "kvpool-bench-record/1"
#: The report schema ``kvpool bench --json`` writes.
REPORT_SCHEMA = "kvpool-bench/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "bench-managers.json"


class BenchRecordError(ValueError):
    """The record is malformed or inconsistent (its message says where)."""


@dataclass(frozen=True)
class Figure:
    """One (workload, size) over every run: steps per run and per-run figures."""

    workload: str
    num_gpu_blocks: int
    steps: int
    #: Per run: median steps/s of ours and of vLLM's, median per-repetition ratio, and
    #: vLLM's fastest repetition over ours.
    ours: tuple[float, ...]
    vllm: tuple[float, ...]
    ratio: tuple[float, ...]
    fastest: tuple[float, ...]


@dataclass(frozen=True)
class BenchRecord:
    command: str
    commit: str
    date: str
    machine: str
    ours: str
    vllm: str
    repeat: int
    figures: tuple[Figure, ...]


def record_field(
    data: Any,
    name: str,
    kind: type | tuple[type, ...],
    where: str,
    error: type[ValueError] = BenchRecordError,
) -> Any:
    """``data[name]``, of ``kind`` (never a bool); ``error`` naming ``where`` and the field
    otherwise. Every record under ``docs/data`` is read field by field through this."""
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        shown = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise error(f"{where}: {name!r} must be a {shown}, not {value!r}")
    return value


def _seconds(row: dict[str, Any], name: str, where: str) -> list[float]:
    values = row.get(name)
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(v, int | float) and v > 0 for v in values)
    ):
        raise BenchRecordError(f"{where}: {name!r} must be a non-empty list of positive seconds")
    return [float(v) for v in values]


def parse(data: Any) -> BenchRecord:
    """The record in ``data`` (a parsed JSON value); :class:`BenchRecordError` otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BenchRecordError(f"not a {SCHEMA} record")
    runs = record_field(data, "runs", list, "record")
    if not runs:
        raise BenchRecordError("record: no runs")
    per_cell: dict[tuple[str, int], list[tuple[int, float, float, float, float]]] = {}
    names: set[tuple[str, str]] = set()
    repeats: set[int] = set()
    for r, run in enumerate(runs):
        where = f"run {r}"
        if not isinstance(run, dict) or run.get("schema") != REPORT_SCHEMA:
            raise BenchRecordError(f"{where}: not a {REPORT_SCHEMA} report")
        if run.get("level") != "manager" or run.get("verified") is not True:
            raise BenchRecordError(f"{where}: not a verified --manager vllm report")
        pools = record_field(run, "pools", dict, where)
        names.add((str(pools.get("ours")), str(pools.get("vllm"))))
        repeats.add(record_field(run, "repeat", int, where))
        for i, row in enumerate(record_field(run, "results", list, where)):
            at = f"{where}, result {i}"
            if not isinstance(row, dict):
                raise BenchRecordError(f"{at}: not an object")
            ours = _seconds(row, "ours_seconds", at)
            vllm = _seconds(row, "vllm_seconds", at)
            if len(ours) != len(vllm):
                raise BenchRecordError(f"{at}: as many seconds for each manager, please")
            steps = record_field(row, "calls", int, at)
            key = (
                record_field(row, "workload", str, at),
                record_field(row, "num_gpu_blocks", int, at),
            )
            per_cell.setdefault(key, []).append(
                (
                    steps,
                    steps / statistics.median(ours),
                    steps / statistics.median(vllm),
                    statistics.median(v / o for o, v in zip(ours, vllm, strict=True)),
                    min(vllm) / min(ours),
                )
            )
    if len(names) != 1:
        raise BenchRecordError(f"record: the runs compare different managers: {sorted(names)}")
    if len(repeats) != 1:
        raise BenchRecordError("record: the runs repeat a different number of times")
    figures = []
    for (workload, size), cells in per_cell.items():
        if len(cells) != len(runs):
            raise BenchRecordError(f"record: {workload} @ {size} is not in every run")
        if len({c[0] for c in cells}) != 1:
            raise BenchRecordError(f"record: {workload} @ {size} runs different step counts")
        figures.append(
            Figure(
                workload,
                size,
                cells[0][0],
                tuple(c[1] for c in cells),
                tuple(c[2] for c in cells),
                tuple(c[3] for c in cells),
                tuple(c[4] for c in cells),
            )
        )
    (ours_name, vllm_name), (repeat,) = names.pop(), repeats
    return BenchRecord(
        record_field(data, "command", str, "record"),
        record_field(data, "commit", str, "record"),
        record_field(data, "date", str, "record"),
        record_field(data, "machine", str, "record"),
        ours_name,
        vllm_name,
        repeat,
        tuple(sorted(figures, key=lambda f: (f.num_gpu_blocks, f.workload))),
    )


def load(docs_dir: Path) -> BenchRecord:
    return parse(json.loads((docs_dir / DATA).read_text()))


def span(values: tuple[float, ...], digits: int) -> str:
    low, high = min(values), max(values)
    if f"{low:,.{digits}f}" == f"{high:,.{digits}f}":
        return f"{low:,.{digits}f}"
    return f"{low:,.{digits}f}\N{EN DASH}{high:,.{digits}f}"


def managers_table(record: BenchRecord) -> str:
    """The figures, then the line saying where they come from."""
    rows = [
        (
            code(f.workload),
            f"{f.num_gpu_blocks:,}",
            f"{f.steps:,}",
            span(f.ours, 0),
            span(f.vllm, 0),
            f"**{span(f.ratio, 2)}**",
            span(f.fastest, 2),
        )
        for f in record.figures
    ]
    headers = (
        "timed",
        "blocks",
        "steps",
        "ours steps/s",
        "vLLM steps/s",
        "ours / vLLM",
        "fastest runs",
    )
    runs = len(record.figures[0].ratio) if record.figures else 0
    source = (
        f"{runs} run{'s' if runs != 1 else ''} of {code(record.command)} at commit "
        f"{code(record.commit)} on {record.date} ({record.machine}): {record.ours} against "
        f"{record.vllm}; each figure the median of {record.repeat} interleaved repetitions "
        "(`fastest runs`: vLLM's fastest repetition over ours), low\N{EN DASH}high over the "
        "runs."
    )
    return table(headers, rows) + "\n" + source + "\n"
