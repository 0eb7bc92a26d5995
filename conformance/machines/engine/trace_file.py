"""An engine machine's trace: the shrunk client and model actions, the engine setup they ran
on and what they found, as ITF JSON (the encoding every trace of the suite uses), and its
replay on a fresh engine.

A trace names the engine it came from as text only: what replays it is the driver the
command line names (a trace file never chooses code to run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...trace.files import slug
from ...trace.itf import ItfError, decode, encode
from .actions import EngineAction
from .driver import EngineDriverFactory, EngineSetup
from .runner import replay_engine

SUFFIX = ".engine.itf.json"


class EngineTraceError(Exception):
    """A file that is not an engine trace (malformed, or of another kind)."""


@dataclass(frozen=True)
class EngineTrace:
    """What ran (``actions`` on an engine built for ``setup``) and what it found."""

    target: str
    setup: EngineSetup
    actions: tuple[EngineAction, ...]
    message: str = ""
    seed: int | None = None
    consumer: str | None = None


def write_engine_trace(trace: EngineTrace, trace_dir: Path, number: int = 1) -> Path:
    """Write ``trace`` into ``trace_dir``; its path."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    suffix = f"-{number}" if number > 1 else ""
    path = trace_dir / f"{slug(trace.target)}-engine-{trace.seed}{suffix}{SUFFIX}"
    path.write_text(json.dumps(encode(trace, EngineTrace), indent=1) + "\n", encoding="utf-8")
    return path


def write_engine_pytest(trace_path: Path, trace: EngineTrace, target: str) -> Path:
    """A standalone pytest file beside ``trace_path`` that replays it on ``target`` (the
    engine the command line named, written as a Python literal) and fails while the
    engine still does."""
    name = slug(trace_path.name.removesuffix(SUFFIX))
    path = trace_path.with_name(f"test_{name}.py")
    path.write_text(
        f'''"""kvpool engine counterexample, replayed: fails while the engine still does."""

from pathlib import Path

from kvpool.conformance.machines.engine.command import load_driver
from kvpool.conformance.machines.engine.trace_file import read_engine_trace, replay_engine_trace
from kvpool.conformance.targets.registry import describe_target

TRACE = Path(__file__).with_name({trace_path.name!r})


def test_{name}_passes() -> None:
    factory, _ = load_driver(describe_target({target!r}))
    found = replay_engine_trace(read_engine_trace(TRACE), factory)
    assert found is None, found
''',
        encoding="utf-8",
    )
    return path


def read_engine_trace(path: Path) -> EngineTrace:
    """The engine trace in ``path``; :class:`EngineTraceError` for anything else."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        trace = decode(data, EngineTrace, str(path))
    except (OSError, ValueError, ItfError, KeyError, TypeError) as exc:
        raise EngineTraceError(f"{path}: not an engine trace: {exc}") from exc
    if not isinstance(trace, EngineTrace):
        raise EngineTraceError(f"{path}: not an engine trace")
    return trace


def replay_engine_trace(trace: EngineTrace, factory: EngineDriverFactory) -> str | None:
    """Replay ``trace``'s actions on a fresh engine from ``factory``: what it finds (the
    same as the trace's message while the engine still fails), or ``None``. An action
    that no longer makes sense at its turn (an abort of a request the engine has since
    finished: its scheduler may plan otherwise now) is left out."""
    found, _ = replay_engine(factory, trace.setup, list(trace.actions), True, trace.consumer)
    return found
