"""The planted bugs' figures of the docs, from ``docs/data/mutants.json``.

The file keeps what ``kvpool mutants --seed N -j 1`` printed at the end of each run (how
many mutants it killed, the median and slowest time to kill, the median shrunk trace, the
unmutated pool's time), with each run's CPU and wall-clock seconds and the machine's load
before it, and the commit, date and machine of the runs. This module checks the record,
renders the scoring page's table from it, and writes it (``python -m
kvpool.conformance.tools.reference.mutants_record --seeds 1,2,3``), so no page types a figure
of its own.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_record import record_field
from .markdown import code, table

SCHEMA = "kvpool-mutants-record/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "mutants.json"
#: The command each run is (the seed goes in place of N).
COMMAND = "kvpool mutants --seed N -j 1"

#: The command's last line: ``39 of 39 killed; time to kill median 0.07s, max 0.9s;
#: shrunk trace median 4 actions``.
SUMMARY = re.compile(
    r"(?P<killed>\d+) of (?P<mutants>\d+) killed; time to kill median "
    r"(?P<median>[\d.]+)s, max (?P<slowest>[\d.]+)s; shrunk trace median "
    r"(?P<trace>[\d.]+) actions"
)
#: Its first line: ``the unmutated pool passes every level (1.5s)``.
CLEAN = re.compile(r"the unmutated pool passes every level \((?P<seconds>[\d.]+)s\)")


class MutantsRecordError(ValueError):
    """The record is malformed, or a run's output is not what the record reads."""


@dataclass(frozen=True)
class SeedRun:
    """One ``kvpool mutants --seed N -j 1`` run."""

    seed: int
    killed: int
    mutants: int
    median_kill_seconds: float
    slowest_kill_seconds: float
    median_trace_actions: float
    clean_seconds: float
    cpu_seconds: float
    wall_seconds: float
    load_before: float


@dataclass(frozen=True)
class MutantsRecord:
    commit: str
    date: str
    machine: str
    runs: tuple[SeedRun, ...]


def _field(data: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    return record_field(data, name, kind, where, MutantsRecordError)


def _number(data: Any, name: str, where: str) -> float:
    value = float(_field(data, name, (int, float), where))
    if not 0 <= value < 1e9:  # NaN too
        raise MutantsRecordError(f"{where}: {name!r} must be a number >= 0, not {value!r}")
    return value


def _run(data: Any, where: str) -> SeedRun:
    run = SeedRun(
        seed=_field(data, "seed", int, where),
        killed=_field(data, "killed", int, where),
        mutants=_field(data, "mutants", int, where),
        median_kill_seconds=_number(data, "median_kill_seconds", where),
        slowest_kill_seconds=_number(data, "slowest_kill_seconds", where),
        median_trace_actions=_number(data, "median_trace_actions", where),
        clean_seconds=_number(data, "clean_seconds", where),
        cpu_seconds=_number(data, "cpu_seconds", where),
        wall_seconds=_number(data, "wall_seconds", where),
        load_before=_number(data, "load_before", where),
    )
    if not 0 <= run.killed <= run.mutants or run.mutants == 0:
        raise MutantsRecordError(f"{where}: {run.killed} killed of {run.mutants} mutants")
    return run


def parse(data: Any) -> MutantsRecord:
    """The record in ``data`` (a parsed JSON value); :class:`MutantsRecordError` otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise MutantsRecordError(f"not a {SCHEMA} record")
    runs = tuple(_run(r, f"run {i}") for i, r in enumerate(_field(data, "runs", list, "record")))
    if not runs:
        raise MutantsRecordError("record: no runs")
    if len({r.seed for r in runs}) != len(runs):
        raise MutantsRecordError("record: a seed is run twice")
    return MutantsRecord(
        _field(data, "commit", str, "record"),
        _field(data, "date", str, "record"),
        _field(data, "machine", str, "record"),
        runs,
    )


def load(docs_dir: Path) -> MutantsRecord:
    return parse(json.loads((docs_dir / DATA).read_text(encoding="utf-8")))


def read_output(seed: int, output: str) -> dict[str, float | int]:
    """The figures of one run's printed output (``COLUMNS`` wide enough for one line)."""
    summary, clean = SUMMARY.search(output), CLEAN.search(output)
    if summary is None or clean is None:
        raise MutantsRecordError(f"seed {seed}: no summary line in the output of kvpool mutants")
    return {
        "seed": seed,
        "killed": int(summary["killed"]),
        "mutants": int(summary["mutants"]),
        "median_kill_seconds": float(summary["median"]),
        "slowest_kill_seconds": float(summary["slowest"]),
        "median_trace_actions": float(summary["trace"]),
        "clean_seconds": float(clean["seconds"]),
    }


def record_table(record: MutantsRecord) -> str:
    """One row per seed, then the line saying where the figures come from."""
    rows = [
        [
            str(r.seed) + (" (default)" if r.seed == 1 else ""),
            f"{r.killed} of {r.mutants}",
            f"{r.median_kill_seconds:g} s",
            f"{r.slowest_kill_seconds:g} s",
            f"{r.median_trace_actions:g} actions",
            f"{r.clean_seconds:g} s",
            f"{r.cpu_seconds:.1f} s / {r.wall_seconds:.1f} s",
            f"{r.load_before:.1f}",
        ]
        for r in record.runs
    ]
    headers = (
        "seed",
        "killed",
        "median time to kill",
        "slowest",
        "shrunk trace median",
        "unmutated pool",
        "whole run, CPU / wall",
        "load before",
    )
    return (
        table(headers, rows)
        + f"\nFrom {code(COMMAND)} at commit {code(record.commit)} on {record.date} "
        f"({record.machine}), the runs one after another; the times to kill and the "
        "unmutated pool's are what each run printed (wall-clock), the whole run's CPU and "
        "wall-clock seconds measured around it.\n"
    )


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write(seeds: list[int], out: Path) -> None:
    """Run ``kvpool mutants --seed N -j 1`` for each seed, one after another, and write
    the record to ``out``; a run that does not exit 0 stops it."""
    root = Path(__file__).resolve().parents[3]
    runs: list[dict[str, float | int]] = []
    for seed in seeds:
        kvpool = Path(sys.executable).with_name("kvpool")
        command = [str(kvpool), "mutants", "--seed", str(seed), "-j", "1"]
        load_before = os.getloadavg()[0]
        cpu, wall = _children_cpu(), time.perf_counter()
        env = {**os.environ, "COLUMNS": "240"}
        done = subprocess.run(command, cwd="/tmp", capture_output=True, text=True, env=env)
        wall, cpu = time.perf_counter() - wall, _children_cpu() - cpu
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            raise SystemExit(f"{shlex.join(command)} exited {done.returncode}")
        figures = read_output(seed, done.stdout)
        figures.update(cpu_seconds=round(cpu, 2), wall_seconds=round(wall, 2))
        figures["load_before"] = round(load_before, 2)
        runs.append(figures)
    data = {
        "schema": SCHEMA,
        "commit": _git(root, "rev-parse", "--short", "HEAD"),
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}",
        "runs": runs,
    }
    parse(data)
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[3] / "docs" / DATA
    )
    args = parser.parse_args()
    write([int(s) for s in args.seeds.split(",")], args.out)


if __name__ == "__main__":
    main()
