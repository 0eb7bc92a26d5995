"""The bench page's floor table, from ``docs/data/bench-floor.json``.

``python -m kvpool.conformance.tools.bench.floor`` prints, per workload and pool size, each
pool's time per call (ours, vLLM's, the floor pool's) and vLLM's time over each, as a
Markdown table. The record keeps that table as printed, with the command, the commit, the
date, the machine and its load before the run; this module checks it and renders it.
Writing it:

    python -m kvpool.conformance.tools.reference.floor_record docs/data/bench-floor.json \\
        --sizes 1000,100000 --ops 5000 --repeat 5 --no-compiled

runs the command with those arguments and keeps what it printed, nothing typed in.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_record import record_field
from .markdown import code, table

SCHEMA = "kvpool-bench-floor-record/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "bench-floor.json"
#: The module the record runs.
MODULE = "kvpool.conformance.tools.bench.floor"


class FloorRecordError(ValueError):
    """The record is malformed, or the command's output is not a table."""


@dataclass(frozen=True)
class FloorRecord:
    command: str
    commit: str
    date: str
    machine: str
    load_before: float
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_table(printed: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the Markdown table ``printed``; :class:`FloorRecordError`
    if there is none."""
    lines = [line for line in printed.splitlines() if line.startswith("|")]
    if len(lines) < 3 or not set(lines[1]) <= set("|-"):
        raise FloorRecordError(f"no table in: {printed[:300]!r}")
    header = _cells(lines[0])
    rows = [_cells(line) for line in lines[2:]]
    if any(len(row) != len(header) for row in rows):
        raise FloorRecordError(f"a row does not have the header's {len(header)} cells")
    return header, rows


def _strings(data: Any, name: str, where: str) -> list[str]:
    value = record_field(data, name, list, where, FloorRecordError)
    if not value or not all(isinstance(v, str) for v in value):
        raise FloorRecordError(f"{where}: {name!r} must be a non-empty list of strings")
    return list(value)


def parse(data: Any) -> FloorRecord:
    """The record in ``data`` (a parsed JSON value); :class:`FloorRecordError` otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise FloorRecordError(f"not a {SCHEMA} record")
    header = _strings(data, "header", "record")
    rows = record_field(data, "rows", list, "record", FloorRecordError)
    if not rows:
        raise FloorRecordError("record: no rows")
    checked = [_strings({"row": row}, "row", f"row {i}") for i, row in enumerate(rows)]
    if any(len(row) != len(header) for row in checked):
        raise FloorRecordError(f"record: a row does not have the header's {len(header)} cells")
    load = float(record_field(data, "load_before", (int, float), "record", FloorRecordError))
    if not 0 <= load < 1e6:  # NaN too
        raise FloorRecordError(f"record: 'load_before' must be a number >= 0, not {load!r}")
    return FloorRecord(
        record_field(data, "command", str, "record", FloorRecordError),
        record_field(data, "commit", str, "record", FloorRecordError),
        record_field(data, "date", str, "record", FloorRecordError),
        record_field(data, "machine", str, "record", FloorRecordError),
        load,
        tuple(header),
        tuple(tuple(row) for row in checked),
    )


def load(docs_dir: Path) -> FloorRecord:
    return parse(json.loads((docs_dir / DATA).read_text(encoding="utf-8")))


def floor_table(record: FloorRecord) -> str:
    """The table as the command printed it, then the line saying where it comes from."""
    return (
        table(record.header, record.rows)
        + f"\nRecorded with {code(record.command)} at commit {code(record.commit)} on "
        f"{record.date} ({record.machine}; one-minute load {record.load_before:.1f} before "
        "the run).\n"
    )


def record(out: Path, arguments: list[str]) -> None:
    """Run :data:`MODULE` with ``arguments`` and keep its table in ``out``."""
    load_before = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, "-m", MODULE, *arguments], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{MODULE} exited {done.returncode}: {done.stderr[-2000:]}")
    header, rows = read_table(done.stdout)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    data = {
        "schema": SCHEMA,
        "command": shlex.join(["python", "-m", MODULE, *arguments]),
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "load_before": round(load_before, 2),
        "header": header,
        "rows": rows,
    }
    parse(data)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    record(Path(sys.argv[1]), sys.argv[2:])
