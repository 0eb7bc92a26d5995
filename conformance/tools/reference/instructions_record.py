"""The bench page's instruction counts, from ``docs/data/bench-instructions.json``.

``python -m kvpool.conformance.tools.bench.instructions WORKLOAD SIZE POOL`` makes one
workload's timed pool calls inside ``functools.reduce``; callgrind, told to count only
inside that function, gives their instructions, which do not depend on the machine's load.
The record keeps, per workload and pool, the calls made and the instructions counted, with
the commands, the commit, the date and the machine; this module checks it and renders
instructions per call and vLLM's over each pool's. Writing it:

    python -m kvpool.conformance.tools.reference.instructions_record \\
        docs/data/bench-instructions.json --ops 2000

runs callgrind once per workload and pool, and keeps what it counted, nothing typed in.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_record import record_field
from .markdown import code, table

SCHEMA = "kvpool-bench-instructions-record/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "bench-instructions.json"
MODULE = "kvpool.conformance.tools.bench.instructions"
#: callgrind, counting only inside the loop that makes the timed calls.
VALGRIND = (
    "valgrind",
    "--tool=callgrind",
    "--collect-atstart=no",
    "--toggle-collect=functools_reduce",
)
#: The pools counted, vLLM's second (the ratios are vLLM's over each).
POOLS = ("ours", "vllm", "floor")
#: The workloads every counted pool serves.
WORKLOADS = ("churn", "prefix-hit", "cache-full")
#: callgrind's output file's total: ``summary: 123456`` (or ``totals:``).
_TOTAL = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


class InstructionsRecordError(ValueError):
    """The record is malformed, or a count could not be read."""


@dataclass(frozen=True)
class Count:
    workload: str
    pool: str
    calls: int
    instructions: int

    @property
    def per_call(self) -> float:
        return self.instructions / self.calls


@dataclass(frozen=True)
class InstructionsRecord:
    command: str
    commit: str
    date: str
    machine: str
    size: int
    counts: tuple[Count, ...]


def _field(data: Any, name: str, kind: type, where: str) -> Any:
    return record_field(data, name, kind, where, InstructionsRecordError)


def _count(data: Any, where: str) -> Count:
    count = Count(
        _field(data, "workload", str, where),
        _field(data, "pool", str, where),
        _field(data, "calls", int, where),
        _field(data, "instructions", int, where),
    )
    if count.calls <= 0 or count.instructions <= 0:
        raise InstructionsRecordError(f"{where}: calls and instructions must be positive")
    return count


def parse(data: Any) -> InstructionsRecord:
    """The record in ``data`` (a parsed JSON value); :class:`InstructionsRecordError`
    otherwise (a pool missing for a workload included)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InstructionsRecordError(f"not a {SCHEMA} record")
    counts = tuple(
        _count(c, f"count {i}") for i, c in enumerate(_field(data, "counts", list, "record"))
    )
    if not counts:
        raise InstructionsRecordError("record: no counts")
    workloads = {c.workload for c in counts}
    for workload in workloads:
        pools = sorted(c.pool for c in counts if c.workload == workload)
        if pools != sorted(POOLS):
            raise InstructionsRecordError(
                f"record: {workload} has pools {', '.join(pools)}, not {', '.join(POOLS)}"
            )
    return InstructionsRecord(
        _field(data, "command", str, "record"),
        _field(data, "commit", str, "record"),
        _field(data, "date", str, "record"),
        _field(data, "machine", str, "record"),
        _field(data, "size", int, "record"),
        counts,
    )


def load(docs_dir: Path) -> InstructionsRecord:
    return parse(json.loads((docs_dir / DATA).read_text(encoding="utf-8")))


def instructions_table(record: InstructionsRecord) -> str:
    """Per workload: each pool's instructions per call, and vLLM's over each other pool's,
    computed from the counts; then where they come from."""
    others = [p for p in POOLS if p != "vllm"]
    headers = [
        f"workload, {record.size:,} blocks",
        *POOLS,
        *(f"vLLM / {p}" for p in others),
    ]
    rows = []
    for workload in dict.fromkeys(c.workload for c in record.counts):
        per = {c.pool: c.per_call for c in record.counts if c.workload == workload}
        rows.append(
            [
                workload,
                *(f"{per[p]:,.0f}" for p in POOLS),
                *(f"{per['vllm'] / per[p]:.2f}" for p in others),
            ]
        )
    return (
        table(headers, rows)
        + f"\nCounted with {code(record.command)} for each workload and pool at commit "
        f"{code(record.commit)} on {record.date} ({record.machine}).\n"
    )


def _counted(workload: str, pool: str, size: int, ops: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kvpool-callgrind-") as folder:
        out = Path(folder) / "callgrind.out"
        done = subprocess.run(
            [*VALGRIND, f"--callgrind-out-file={out}", sys.executable, "-m", MODULE,
             workload, str(size), pool, "--ops", str(ops)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"callgrind on {workload} {pool} exited {done.returncode}: "
                             f"{done.stderr[-2000:]}")  # fmt: skip
        total = _TOTAL.search(out.read_text(encoding="utf-8", errors="replace"))
    if total is None or not done.stdout.strip().isdigit():
        raise InstructionsRecordError(f"no count for {workload} on {pool}")
    return {
        "workload": workload,
        "pool": pool,
        "calls": int(done.stdout.strip()),
        "instructions": int(total.group(1)),
    }


def record(out: Path, size: int, ops: int) -> None:
    """Count every workload of :data:`WORKLOADS` on every pool of :data:`POOLS`."""
    counts = [_counted(w, p, size, ops) for w in WORKLOADS for p in POOLS]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    data = {
        "schema": SCHEMA,
        "command": shlex.join(
            [*VALGRIND, "python", "-m", MODULE, "WORKLOAD", str(size), "POOL", "--ops", str(ops)]
        ),
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "size": size,
        "counts": counts,
    }
    parse(data)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--ops", type=int, default=2000)
    args = parser.parse_args()
    record(args.out, args.size, args.ops)
