"""Saving a failure for the user: the recorded trace, its pytest file, and how to replay it."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from rich.console import Console

from .files import slug, write_pytest, write_trace
from .model import Trace
from .record import record
from .trust import replay_command


def kvpool_version() -> str:
    """This package's installed version (``unknown`` when run from a bare source tree)."""
    try:
        return metadata.version("kvpool-spec")
    except metadata.PackageNotFoundError:
        return "unknown"


def save_trace(console: Console, trace: Trace, trace_dir: Path, number: int = 1) -> Path | None:
    """Write a failure's trace and its pytest file; print where, and how to replay.

    Returns the trace's path, or ``None`` when there was nothing to write or recording
    (which replays the target) failed; the reason is printed.
    """
    meta = trace.meta
    if not trace.actions:
        return None
    try:
        recorded = record(trace)
    except Exception as exc:  # recording replays the target; say so rather than crash
        console.print(f"  (no trace written: replaying for the record failed: {exc})")
        return None
    suffix = f"-{number}" if number > 1 else ""
    level = meta.level if meta.consumer is None else f"{meta.level}-{slug(meta.consumer)}"
    # a manager's trace is named after the manager (its run may have named no pool)
    named = meta.manager if meta.level == "manager" and meta.manager else meta.target
    name = f"{slug(named)}-{meta.machine}-{level}-{meta.seed}{suffix}.itf.json"
    path = write_trace(recorded, trace_dir / name)
    test = write_pytest(path, recorded)
    _line = console.print
    _line(f"\n  Trace written to {path}", highlight=False, soft_wrap=True)
    _line(f"  pytest file:     {test}", highlight=False, soft_wrap=True)
    _line(f"  Replay it with:  {replay_command(str(path), meta)}", highlight=False, soft_wrap=True)
    return path
