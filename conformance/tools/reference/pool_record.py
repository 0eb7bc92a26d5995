"""The pools' benchmark figures of the docs, from ``docs/data/bench-pools.json``.

The file keeps what ``kvpool bench --compiled --json`` printed, run by run, with the
command, commit, date and machine of the runs beside it (``.ci/bench-managers --pools``
writes it); this module checks it and renders the bench page's tables: ours and our
compiled build over vLLM's pool per workload and size, the memory per block, and the calls
per second, each as the runs' lowest and highest, taken from what each run printed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_record import REPORT_SCHEMA, SCHEMA, BenchRecordError, record_field, span
from .markdown import code, table

#: Where the record lives, under the docs folder.
DATA = Path("data") / "bench-pools.json"
#: The aim the tables mark: a cell any run of which is under it is bold.
AIM = 2.0
#: Each workload's name in the tables.
WORKLOADS = {
    "churn": "allocate/free churn",
    "prefix-hit": "prefix hits (lookups, touches of free cached blocks)",
    "cache-full": "registering full blocks",
    "requests": "the request workload",
}


@dataclass(frozen=True)
class Cell:
    """One (workload, size) over every run: ours and compiled over vLLM, and the calls
    per second of each pool."""

    workload: str
    num_gpu_blocks: int
    ratio: tuple[float, ...]
    compiled_ratio: tuple[float, ...]
    ours: tuple[float, ...]
    vllm: tuple[float, ...]
    compiled: tuple[float, ...]


@dataclass(frozen=True)
class Memory:
    num_gpu_blocks: int
    ours: tuple[float, ...]
    vllm: tuple[float, ...]
    compiled: tuple[float, ...]


@dataclass(frozen=True)
class Growth:
    """One workload's cost per call from the smallest pool to the largest, over every run:
    each side's ratio (large / small) and the microseconds a call added."""

    workload: str
    smallest: int
    largest: int
    ours: tuple[float, ...]
    vllm: tuple[float, ...]
    ours_added_us: tuple[float, ...]
    vllm_added_us: tuple[float, ...]


@dataclass(frozen=True)
class PoolRecord:
    command: str
    commit: str
    date: str
    machine: str
    runs: int
    cells: tuple[Cell, ...]
    memory: tuple[Memory, ...]
    growth: tuple[Growth, ...] = ()


def _positive(row: dict[str, Any], name: str, where: str) -> float:
    value = row.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise BenchRecordError(f"{where}: {name!r} must be a positive number, not {value!r}")
    return float(value)


def _number(row: dict[str, Any], name: str, where: str) -> float:
    value = row.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool) or not -1e9 < value < 1e9:
        raise BenchRecordError(f"{where}: {name!r} must be a number, not {value!r}")
    return float(value)


def parse(data: Any) -> PoolRecord:
    """The record in ``data`` (a parsed JSON value); :class:`BenchRecordError` otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BenchRecordError(f"not a {SCHEMA} record")
    runs = record_field(data, "runs", list, "record")
    if not runs:
        raise BenchRecordError("record: no runs")
    cells: dict[tuple[str, int], list[tuple[float, ...]]] = {}
    memory: dict[int, list[tuple[float, ...]]] = {}
    growth: dict[tuple[str, int, int], list[tuple[float, ...]]] = {}
    for r, run in enumerate(runs):
        where = f"run {r}"
        if not isinstance(run, dict) or run.get("schema") != REPORT_SCHEMA:
            raise BenchRecordError(f"{where}: not a {REPORT_SCHEMA} report")
        if run.get("level") != "pool" or run.get("verified") is not True:
            raise BenchRecordError(f"{where}: not a verified report of the pools")
        for i, row in enumerate(record_field(run, "results", list, where)):
            at = f"{where}, result {i}"
            if not isinstance(row, dict):
                raise BenchRecordError(f"{at}: not an object")
            workload = record_field(row, "workload", str, at)
            if workload not in WORKLOADS:
                raise BenchRecordError(f"{at}: no workload {workload!r}")
            key = (workload, record_field(row, "num_gpu_blocks", int, at))
            names = ("ratio", "compiled_ratio", "ours_ops_per_s", "vllm_ops_per_s")
            figures = tuple(_positive(row, name, at) for name in names)
            cells.setdefault(key, []).append((*figures, _positive(row, "compiled_ops_per_s", at)))
        for i, row in enumerate(record_field(run, "memory", list, where)):
            at = f"{where}, memory {i}"
            if not isinstance(row, dict):
                raise BenchRecordError(f"{at}: not an object")
            memory.setdefault(record_field(row, "num_gpu_blocks", int, at), []).append(
                tuple(
                    _positive(row, f"{side}_bytes_per_block", at)
                    for side in ("ours", "vllm", "compiled")
                )
            )
        growth_of = run.get("growth", {})  # older reports keep none
        if not isinstance(growth_of, dict):
            raise BenchRecordError(f"{where}: 'growth' must be an object")
        for workload, row in sorted(growth_of.items()):
            at = f"{where}, growth of {workload}"
            if workload not in WORKLOADS or not isinstance(row, dict):
                raise BenchRecordError(f"{at}: not a workload's growth")
            sizes = (record_field(row, "from", int, at), record_field(row, "to", int, at))
            figures = (_positive(row, "ours", at), _positive(row, "vllm", at))
            added = tuple(_number(row, f"{side}_added_us", at) for side in ("ours", "vllm"))
            growth.setdefault((workload, *sizes), []).append((*figures, *added))
    counts = [(f"{w} @ {n}", len(c)) for (w, n), c in cells.items()]
    counts += [(f"growth of {w}", len(g)) for (w, _, _), g in growth.items()]
    counts += [(f"memory @ {n}", len(m)) for n, m in memory.items()]
    for what, count in counts:
        if count != len(runs):
            raise BenchRecordError(f"record: {what} is not in every run")
    return PoolRecord(
        record_field(data, "command", str, "record"),
        record_field(data, "commit", str, "record"),
        record_field(data, "date", str, "record"),
        record_field(data, "machine", str, "record"),
        len(runs),
        tuple(
            Cell(w, n, *(tuple(f[k] for f in found) for k in range(5)))
            for (w, n), found in cells.items()
        ),
        tuple(
            Memory(n, *(tuple(f[k] for f in found) for k in range(3)))
            for n, found in sorted(memory.items())
        ),
        tuple(
            Growth(w, low, high, *(tuple(f[k] for f in found) for k in range(4)))
            for (w, low, high), found in growth.items()
        ),
    )


def load(docs_dir: Path) -> PoolRecord:
    return parse(json.loads((docs_dir / DATA).read_text()))


def _blocks(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def _ratio(values: tuple[float, ...]) -> str:
    shown = span(values, 2)
    return f"**{shown}**" if min(values) < AIM else shown


def pools_table(record: PoolRecord) -> str:
    """Ours and compiled over vLLM, the memory per block, the calls per second, then the
    line saying where the figures come from."""
    sizes = sorted({c.num_gpu_blocks for c in record.cells})
    by_key = {(c.workload, c.num_gpu_blocks): c for c in record.cells}
    workloads = [w for w in WORKLOADS if any((w, n) in by_key for n in sizes)]

    def row(workload: str, figure: str) -> list[str]:
        cells = [by_key.get((workload, n)) for n in sizes]
        return [
            WORKLOADS[workload],
            *(_ratio(getattr(c, figure)) if c else "not run" for c in cells),
        ]

    ratios = table(
        [
            "workload",
            *(f"{_blocks(n)} blocks" for n in sizes),
            *(f"{_blocks(n)}, compiled" for n in sizes),
        ],
        [row(w, "ratio") + row(w, "compiled_ratio")[1:] for w in workloads],
    )
    memory = table(
        ["blocks", "ours", "compiled", "vLLM's"],
        [
            [f"{m.num_gpu_blocks:,}", span(m.ours, 0), span(m.compiled, 0), span(m.vllm, 0)]
            for m in record.memory
        ],
    )
    calls = table(
        ["workload", *(f"{_blocks(n)} blocks" for n in sizes)],
        [
            [
                code(w),
                *(
                    " / ".join(
                        span(tuple(v / 1e6 for v in getattr(c, side)), 2)
                        for side in ("ours", "vllm", "compiled")
                    )
                    if (c := by_key.get((w, n)))
                    else "not run"
                    for n in sizes
                ),
            ]
            for w in workloads
        ],
    )
    runs = f"{record.runs} run{'s' if record.runs != 1 else ''}"
    return (
        f"Ours / vLLM's pool (low\N{EN DASH}high over {runs}; bold where a run is under "
        f"{AIM:g}x):\n\n{ratios}\n"
        "Memory per block in bytes, every block cached (tracemalloc, construction plus a "
        f"prefix-hit run):\n\n{memory}\n"
        f"Calls per second in millions, ours / vLLM's / compiled:\n\n{calls}\n"
        f"From {runs} of {code(record.command)} at commit {code(record.commit)} on "
        f"{record.date} ({record.machine}); each figure what a run printed (a ratio is the "
        "median of its interleaved repetitions' ratios).\n"
    )


def _more(ours: tuple[float, ...], vllm: tuple[float, ...]) -> int:
    """In how many runs ours added more than vLLM's (the runs in the same order)."""
    return sum(o > v for o, v in zip(ours, vllm, strict=True))


def growth_table(record: PoolRecord) -> str:
    """Per workload, what a call of each pool added from the smallest pool to the largest,
    in microseconds and as a ratio, low\N{EN DASH}high over the runs."""
    rows = [
        [
            WORKLOADS[g.workload],
            f"{span(g.ours_added_us, 2)} / {span(g.vllm_added_us, 2)}",
            f"{span(g.ours, 2)} / {span(g.vllm, 2)}",
            f"{_more(g.ours_added_us, g.vllm_added_us)} of {len(g.ours)}",
        ]
        for w in WORKLOADS
        for g in record.growth
        if g.workload == w
    ]
    if not rows:
        return "The record keeps no growth figures.\n"
    sizes = {(g.smallest, g.largest) for g in record.growth}
    shown = ", ".join(f"{_blocks(a)} to {_blocks(b)} blocks" for a, b in sorted(sizes))
    return (
        table(
            [
                "workload",
                "\N{MICRO SIGN}s a call added, ours / vLLM's",
                "cost per call, large / small, ours / vLLM's",
                "runs where ours added more",
            ],
            rows,
        )
        + f"\nFrom {shown}, in the same {record.runs} runs of {code(record.command)} at "
        f"commit {code(record.commit)} (each run's own figures; negative: a call took less "
        "time in the larger pool).\n"
    )
