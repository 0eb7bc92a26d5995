"""The request operations, each declared once: its action type
(``kvpool.spec.manager.actions``), how often it is drawn in a state (0: it cannot be), its
draw, and how it drives a manager under test (:mod:`.drives`): checked, in a lockstep run,
and bare, in a benchmark (``None`` where the benchmark's workload has no such step).
The request machine (:func:`~.machine.next_request_action`), the lockstep run
(:meth:`~.manager_run.ManagerRun.drive`) and the manager benchmark read
:data:`REQUEST_OPERATIONS`. The spec keeps its own dispatch (``kvpool.spec.manager.step``),
in the order of its prose, as it does for the pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvpool.spec.manager import (
    Admit,
    Append,
    Compute,
    EvictCached,
    Finish,
    ManagerResult,
    ManagerState,
    Preempt,
    RequestAction,
    ResetCache,
    Resume,
)

from . import draw, drives
from .draw import busy, evictable, preempted, running
from .drives import ManagerRun
from .target import ManagerTarget

#: The calls of one action on a manager under test, checked by a lockstep run.
CheckedDrive = Callable[[ManagerRun, RequestAction], ManagerResult]
#: The calls alone, as a scheduler step makes them.
BareDrive = Callable[[ManagerTarget, RequestAction], ManagerResult]


@dataclass(frozen=True)
class RequestOperation:
    """One request operation, as the request machine sees it."""

    action: type[RequestAction]
    #: How often it is drawn in a state, relative to the others; 0 when it cannot be.
    weight: Callable[[ManagerState], int]
    #: Its draw (always inside the contract).
    draw: draw.Drawer
    #: How a lockstep run drives a manager under test with it.
    checked: CheckedDrive
    #: How a benchmark drives one (``None``: the benchmark's workload has no such step).
    bare: BareDrive | None = None

    @property
    def name(self) -> str:
        return self.action.operation


#: Every request operation, in the order the request machine weighs them (its draws depend
#: on it).
REQUEST_OPERATIONS: tuple[RequestOperation, ...] = (
    RequestOperation(
        Admit,
        lambda s: 1 if busy(s) else 4,
        draw.draw_admit,
        drives.checked_admit,
        drives.bare_admit,
    ),
    RequestOperation(
        Append,
        lambda s: 3 if running(s) else 0,
        draw.draw_append,
        drives.checked_append,
        drives.bare_append,
    ),
    RequestOperation(
        Compute,
        lambda s: 6 if running(s) else 0,
        draw.draw_compute,
        drives.checked_compute,
        drives.bare_compute,
    ),
    RequestOperation(
        Preempt,
        lambda s: 1 if running(s) else 0,
        draw.draw_preempt,
        drives.checked_preempt,
        drives.bare_preempt,
    ),
    RequestOperation(
        Resume,
        lambda s: 2 if preempted(s) else 0,
        draw.draw_resume,
        drives.checked_resume,
        drives.bare_resume,
    ),
    RequestOperation(
        Finish,
        lambda s: (4 if busy(s) else 2) if s.requests else 0,
        draw.draw_finish,
        drives.checked_finish,
        drives.bare_finish,
    ),
    RequestOperation(ResetCache, lambda s: 1, draw.draw_reset, drives.checked_reset),
    RequestOperation(
        EvictCached, lambda s: 3 if evictable(s) else 0, draw.draw_evict, drives.checked_evict
    ),
)
_BY_NAME = {op.name: op for op in REQUEST_OPERATIONS}


def named(name: str) -> RequestOperation:
    """The request operation called ``name`` (a ``KeyError`` for an unknown one)."""
    return _BY_NAME[name]
