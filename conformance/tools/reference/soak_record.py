"""The monitor-soak page's tables, from ``docs/data/monitor-soak.json``.

``.ci/soak-monitor`` prints, for one soak of ``kvpool monitor`` under a hostile publisher,
a line naming its command and commit, a table of figures (messages sent and handled,
dropped, malformed share, gaps, memory, exit status, wall time) and the monitor's own
summary line. The record keeps those, soak by soak, as printed, with the date and machine;
this module checks it and renders each soak's table. Writing it:

    python -m kvpool.conformance.tools.reference.soak_record docs/data/monitor-soak.json \\
        --seconds 10 -- --seconds 10 --rate 0

runs the script once per ``--``-separated argument list and keeps what it printed, nothing
typed in.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bench_record import record_field
from .markdown import code, table

SCHEMA = "kvpool-monitor-soak-record/1"
#: Where the record lives, under the docs folder.
DATA = Path("data") / "monitor-soak.json"
#: The script each soak runs, from the checkout's root.
SCRIPT = ".ci/soak-monitor"
#: The script's first line: ```.ci/soak-monitor --seconds 60` at commit `50d3f10`, ...``.
_HEADLINE = re.compile(r"^`(?P<command>[^`]+)` at commit `(?P<commit>[0-9a-f]{7,40})`")
_ROW = re.compile(r"^\| (?P<name>[^|]+?) \| (?P<value>[^|]*?) \|$")
_SUMMARY = "monitor summary: "


class SoakRecordError(ValueError):
    """The record is malformed, or a soak's output is not what the record reads."""


@dataclass(frozen=True)
class Soak:
    """One soak as the script printed it."""

    command: str
    commit: str
    rows: tuple[tuple[str, str], ...]
    summary: str


@dataclass(frozen=True)
class SoakRecord:
    date: str
    machine: str
    soaks: tuple[Soak, ...]


def _text(data: Any, name: str, where: str) -> str:
    text: str = record_field(data, name, str, where, SoakRecordError)
    return text


def _soak(data: Any, where: str) -> Soak:
    rows = record_field(data, "rows", list, where, SoakRecordError)
    pairs = []
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 2 and all(isinstance(c, str) for c in row)):
            raise SoakRecordError(f"{where}: row {i} must be a [figure, value] pair of strings")
        pairs.append((row[0], row[1]))
    if not pairs:
        raise SoakRecordError(f"{where}: no rows")
    return Soak(
        _text(data, "command", where), _text(data, "commit", where), tuple(pairs),
        _text(data, "summary", where),
    )  # fmt: skip


def parse(data: Any) -> SoakRecord:
    """The record in ``data`` (a parsed JSON value); :class:`SoakRecordError` otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SoakRecordError(f"not a {SCHEMA} record")
    soaks = record_field(data, "soaks", list, "record", SoakRecordError)
    if not soaks:
        raise SoakRecordError("record: no soaks")
    return SoakRecord(
        _text(data, "date", "record"),
        _text(data, "machine", "record"),
        tuple(_soak(s, f"soak {i}") for i, s in enumerate(soaks)),
    )


def load(docs_dir: Path) -> SoakRecord:
    return parse(json.loads((docs_dir / DATA).read_text(encoding="utf-8")))


def read_output(printed: str) -> dict[str, Any]:
    """One soak's fields from what the script printed; :class:`SoakRecordError` if the
    headline, the table or the summary line is missing."""
    lines = printed.splitlines()
    headline = next((m for m in map(_HEADLINE.match, lines) if m), None)
    if headline is None:
        raise SoakRecordError(f"no '`COMMAND` at commit `C`' line in: {printed[:300]!r}")
    rows = [[m["name"].strip(), m["value"].strip()] for m in map(_ROW.match, lines) if m]
    rows = [r for r in rows if r != ["figure", "value"]]
    summary = next((ln[len(_SUMMARY) :] for ln in lines if ln.startswith(_SUMMARY)), None)
    if not rows or summary is None:
        raise SoakRecordError(f"no table or no summary line in: {printed[:300]!r}")
    return {
        "command": headline["command"],
        "commit": headline["commit"],
        "rows": rows,
        "summary": summary,
    }


def soak_tables(record: SoakRecord) -> str:
    """Each soak: the line naming its command and commit, its table, its summary."""
    parts = []
    for soak in record.soaks:
        head = (
            f"{code(soak.command)} at commit {code(soak.commit)}, on {record.date} "
            f"({record.machine}):"
        )
        rows = table(("figure", "value"), soak.rows)
        parts.append(f"{head}\n\n{rows}\nmonitor summary: {soak.summary}")
    return "\n\n".join(parts) + "\n"


def record(out: Path, runs: list[list[str]], root: Path) -> None:
    """Run :data:`SCRIPT` once per argument list of ``runs`` (in ``root``) and keep what
    each printed in ``out``, with the date and machine."""
    soaks = []
    for arguments in runs:
        done = subprocess.run(
            [sys.executable, SCRIPT, *arguments], cwd=root, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"{SCRIPT} {' '.join(arguments)} exited {done.returncode}: "
                             f"{done.stderr[-2000:]}")  # fmt: skip
        soaks.append(read_output(done.stdout))
    data = {
        "schema": SCHEMA,
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}",
        "soaks": soaks,
    }
    parse(data)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _runs(argv: list[str]) -> list[list[str]]:
    runs: list[list[str]] = [[]]
    for word in argv:
        if word == "--":
            runs.append([])
        else:
            runs[-1].append(word)
    return runs


if __name__ == "__main__":
    record(Path(sys.argv[1]), _runs(sys.argv[2:]), Path(__file__).resolve().parents[3])
