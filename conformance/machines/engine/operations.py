"""The engine machine's actions, each declared once: its action type (:mod:`.actions`), its
draws and how often each is drawn in a run's state, when it makes sense in a run (a replay
skips it otherwise), the driver capability it needs (``None``: every driver takes it), the
driver call it makes, what the run does with it (:mod:`.engine_run`: the call and the
clients' side of it), and its reference-page entry.

The machine's draw (:func:`next_actions`), the run (:meth:`~.engine_run.EngineRun.apply`
and :meth:`~.engine_run.EngineRun.allows`), the driver check
(:func:`~.driver_check.driver_problems`) and the docs' table of the machine's actions (the
``engine-actions`` fragment) read
:data:`ENGINE_OPERATIONS`; adding an action is adding one record here (and its action type,
its draws and what the run does with it). The engine machine has no wire form of its own:
a trace carries each action as ITF JSON by its type (:mod:`.trace_file`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...search.choices import Choices
from . import draw
from .actions import Abort, Arrive, EngineAction, Flush, RunStep
from .clients import EngineCase

#: Draws actions (one, or several for a burst) from the run's state.
Drawer = Callable[[Choices, EngineCase], list[EngineAction]]


@dataclass(frozen=True)
class EngineDraw:
    """One way the machine draws an operation: its name among the draws (the choice's
    label), how often in a state (0: not now) and its draw."""

    kind: str
    weight: Callable[[EngineCase], int]
    draw: Drawer


@dataclass(frozen=True)
class EngineOperation:
    """One engine-machine action, as every part of the suite sees it."""

    #: The action type (its ``operation`` is this operation's name).
    action: type[EngineAction]
    #: Its draws, in the order the machine weighs them (the draws depend on it).
    draws: tuple[EngineDraw, ...]
    #: The driver method it calls.
    call: str
    #: What the run does with it: the driver call, and what the clients see of it.
    take: Callable[[EngineCase, Any], None]
    #: What the docs say it is.
    about: str
    #: The driver capability it needs (drawn, replayed and called only with it).
    needs: str | None = None
    #: Whether it makes sense now (an abort of a request still live, ...).
    fits: Callable[[EngineCase, Any], bool] = lambda run, action: True
    #: Variants of an action asking for less, tried by the shrinker.
    simpler: Callable[[Any], list[Any]] = lambda action: []

    @property
    def name(self) -> str:
        return str(self.action.operation)

    def weight(self, kind: EngineDraw, run: EngineCase) -> int:
        """How often ``kind`` is drawn in ``run`` (0 without the capability it needs)."""
        return kind.weight(run) if self.needs is None or self.needs in run.can else 0

    def allowed(self, run: EngineCase, action: EngineAction) -> bool:
        """Whether ``action`` makes sense in ``run`` and its driver can take it."""
        return (self.needs is None or self.needs in run.can) and self.fits(run, action)


def _live(run: EngineCase) -> int:
    return len(run.clients)


#: Every engine-machine action, in the order the machine weighs them (its draws depend on
#: it).
ENGINE_OPERATIONS: tuple[EngineOperation, ...] = (
    EngineOperation(
        Arrive,
        (
            EngineDraw("arrive", lambda run: 4 if _live(run) < 4 else 1, draw.draw_arrival),
            EngineDraw("burst", lambda run: 1, draw.draw_burst),
        ),
        call="submit",
        take=lambda run, action: run.arrive(action),
        fits=lambda run, action: action.request_id not in run.sent,
        simpler=draw.simpler_arrival,
        about="a client sends a request: a new prompt, one opening with a shared system "
        "prompt, a session's next turn, a long one, a repeat under another salt, or a "
        "burst of several at once",
    ),
    EngineOperation(
        RunStep,
        (EngineDraw("step", lambda run: 8 if _live(run) else 1, draw.draw_step),),
        call="step",
        take=lambda run, action: run.run_step(action),
        simpler=draw.simpler_step,
        about="the scheduler plans a batch, the suite's model runs it (writes the scheduled "
        "tokens, samples one token for each request reaching its end, stops some early) "
        "and the results go back through report()",
    ),
    EngineOperation(
        Abort,
        (EngineDraw("abort", lambda run: 1 if _live(run) else 0, draw.draw_abort),),
        call="abort",
        take=lambda run, action: run.abort(action),
        needs="abort",
        fits=lambda run, action: action.request_id in run.clients,
        about="a client gives up on a live request, waiting or running",
    ),
    EngineOperation(
        Flush,
        (EngineDraw("flush", lambda run: 0 if _live(run) else 1, draw.draw_flush),),
        call="flush",
        take=lambda run, action: run.flush(),
        needs="flush",
        fits=lambda run, action: not run.clients,
        about="the operator drops the prefix cache (reset_prefix_cache) while no request is live",
    ),
)


def operation_of(action: EngineAction) -> EngineOperation:
    """The table's record for ``action`` (a ``KeyError`` for an action it lacks)."""
    for op in ENGINE_OPERATIONS:
        if type(action) is op.action:
            return op
    raise KeyError(action.operation)


def next_actions(choices: Choices, run: EngineCase) -> list[EngineAction]:
    """The machine's next action (several for a burst): one of the table's draws, weighted
    by the run's state."""
    weighed = [(kind, op.weight(kind, run)) for op in ENGINE_OPERATIONS for kind in op.draws]
    return choices.weighted(weighed, "engine action").draw(choices, run)


def capability_calls() -> dict[str, str]:
    """Each capability an action needs, with the driver method that action calls."""
    return {op.needs: op.call for op in ENGINE_OPERATIONS if op.needs is not None}
