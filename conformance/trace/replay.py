"""Replaying a trace file: the same verdict every time, or the target is nondeterministic.

What runs is chosen by :func:`.trust.choose`: a name in the file is loaded only when it is
built in; anything else the caller passes (``target``, ``manager``, ``versus``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .files import read_trace
from .model import Trace
from .record import BuildDiverged, record
from .trust import choose


@dataclass(frozen=True)
class Verdict:
    """What a replay found: the recorded trace, and the first divergence (if any)."""

    trace: Trace
    #: The 1-based step that diverged and why (0: as the target was built); ``None`` when
    #: the target conforms.
    step: int | None
    message: str | None
    #: Two replays of the same trace disagreed.
    nondeterministic: bool = False

    @property
    def conforms(self) -> bool:
        return self.message is None and not self.nondeterministic

    def describe(self) -> str:
        if self.nondeterministic:
            return f"the target is nondeterministic: {self.message}"
        if self.message is None and self.trace.meta.versus is not None:
            return f"pools A and B agree on all {len(self.trace.actions)} actions"
        if self.message is None:
            return f"the target conforms on all {len(self.trace.actions)} actions"
        if self.step == 0:
            return f"the target diverges before the first action, {self.message}"
        return f"step {self.step} of {len(self.trace.actions)} diverges: {self.message}"


def _first_divergence(trace: Trace) -> tuple[int | None, str | None]:
    step = trace.diverging_step
    return (step, trace.steps[step - 1].verdict) if step is not None else (None, None)


def replay_trace(
    trace: Trace,
    target: str | None = None,
    manager: str | None = None,
    runs: int = 2,
    versus: str | None = None,
    profile: str | None = None,
) -> Verdict:
    """Replay ``trace`` ``runs`` times on fresh targets; the verdicts must agree. Raises
    :class:`.trust.NamedInFile` when the trace names a pool, manager, pool B or profile
    that is not built in and the caller did not name one."""
    chosen = choose(trace.meta, target, manager, versus, profile)

    def recorded_divergence() -> tuple[Trace, int | None, str | None]:
        try:
            recorded = record(trace, chosen.target, chosen.manager, chosen.versus, chosen.profile)
        except BuildDiverged as exc:  # step 0: the target as it was built
            return trace, 0, str(exc)
        return (recorded, *_first_divergence(recorded))

    recorded, step, message = recorded_divergence()
    for _ in range(runs - 1):
        _, again_step, again_message = recorded_divergence()
        if (again_step, again_message) != (step, message):
            return Verdict(
                recorded,
                step,
                f"one replay gave {_said(step, message)}, "
                f"another {_said(again_step, again_message)}",
                nondeterministic=True,
            )
    return Verdict(recorded, step, message)


def _said(step: int | None, message: str | None) -> str:
    return "no divergence" if message is None else f"step {step}: {message}"


def replay_file(
    path: Path, target: str | None = None, manager: str | None = None, versus: str | None = None
) -> Verdict:
    """Replay the trace in ``path`` (see :func:`replay_trace`)."""
    return replay_trace(read_trace(Path(path)), target, manager, versus=versus)
