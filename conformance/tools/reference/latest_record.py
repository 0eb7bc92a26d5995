"""The targets page's table of every engine's newest release, from ``docs/data/latest.json``.

The file keeps the rows ``kvpool targets --latest --json`` printed (each engine's newest
release on the package index, whether the short run of it ran, what it found or why it was
refused), with the command, the commit, the date and the machine of the run. Writing it:

    python -m kvpool.conformance.tools.reference.latest_record docs/data/latest.json

runs the command and keeps what it printed, nothing typed in. This module checks the file
and renders the table (engine, newest on the index, ran, result).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_record import record_field
from .markdown import code, table

SCHEMA = "kvpool-latest-record/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "latest.json"
COMMAND = "kvpool targets --latest --json"


class LatestRecordError(ValueError):
    """The record is malformed (its message says where)."""


@dataclass(frozen=True)
class Release:
    """One engine's row: its newest release and what the short run of it gave."""

    engine: str
    newest: str
    supported: str
    result: str
    rules: tuple[str, ...]
    missing: str
    profile: str


@dataclass(frozen=True)
class LatestRecord:
    command: str
    commit: str
    date: str
    machine: str
    rows: tuple[Release, ...]


def _text(data: Any, name: str, where: str) -> str:
    text: str = record_field(data, name, str, where, LatestRecordError)
    return text


def _row(data: Any, where: str) -> Release:
    rules = data.get("rules", []) if isinstance(data, dict) else None
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise LatestRecordError(f"{where}: 'rules' must be a list of strings")
    row = Release(
        _text(data, "engine", where),
        _text(data, "newest", where),
        _text(data, "supported", where),
        _text(data, "result", where),
        tuple(rules),
        _text(data, "missing", where),
        _text(data, "profile", where),
    )
    if row.supported == "yes" and row.result not in ("pass", "findings"):
        raise LatestRecordError(f"{where}: supported without a run ({row.result!r})")
    return row


def parse(data: Any) -> LatestRecord:
    """The record in ``data`` (a parsed JSON value); :class:`LatestRecordError` otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise LatestRecordError(f"not a {SCHEMA} record")
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows:
        raise LatestRecordError("record: 'rows' must be a non-empty list")
    return LatestRecord(
        _text(data, "command", "record"),
        _text(data, "commit", "record"),
        _text(data, "date", "record"),
        _text(data, "machine", "record"),
        tuple(_row(r, f"row {i}") for i, r in enumerate(rows)),
    )


def load(docs_dir: Path) -> LatestRecord:
    return parse(json.loads((docs_dir / DATA).read_text(encoding="utf-8")))


def _ran(row: Release) -> str:
    if row.supported == "yes":
        return "yes"
    if row.result == "refused" or row.supported == "no":
        return "refused"
    return "not asked"


def _result(row: Release) -> str:
    if row.supported == "yes":
        if row.result == "pass":
            return "pass" + (f" ({row.missing})" if row.missing == "no events" else "")
        return "findings: " + ", ".join(code(r) for r in row.rules)
    return row.missing.replace("|", "\\|")[:300] or "-"


def latest_table(record: LatestRecord) -> str:
    """Engine, newest release on the index, whether it ran, and its result (the rules it
    broke, or why it was refused), then the line saying where the figures come from."""
    rows = [
        [code(r.engine), code(r.newest), _ran(r), _result(r), code(r.profile)] for r in record.rows
    ]
    lines = [table(["engine", "newest on the index", "ran", "result", "profile"], rows)]
    lines.append(
        f"\nRecorded with {code(record.command)} at commit {code(record.commit)} on "
        f"{record.date} ({record.machine}); each release's short run is the one "
        "`kvpool targets --latest` makes (every level the engine supports, 8 test cases "
        "of 15 steps, seed 1)."
    )
    return "\n".join(lines) + "\n"


def record(out: Path) -> None:
    """Run :data:`COMMAND` and keep its rows in ``out`` with the commit, date and machine."""
    argv = [sys.executable, "-c", "from kvpool.conformance.cli import main; main()"]
    done = subprocess.run(
        [*argv, "targets", "--latest", "--json"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{COMMAND} exited {done.returncode}: {done.stderr[-2000:]}")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    write(out, json.loads(done.stdout), commit)


def write(out: Path, rows: Any, commit: str) -> None:
    """Keep ``rows`` (as the command printed them) in ``out``, checked."""
    data = {
        "schema": SCHEMA,
        "command": COMMAND,
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "rows": rows,
    }
    parse(data)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    record(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs") / DATA)
