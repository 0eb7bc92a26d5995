"""The request operations, each declared once for the request machine: its action type
(``kvpool.spec.manager.actions``), how often it is drawn in a state (0: it cannot be), and
its draw. :func:`~.machine.next_request_action` reads :data:`REQUEST_OPERATIONS`.

Not yet here: how a run drives a manager target with each action
(:meth:`~.manager_run.ManagerRun.drive`, where the calls are interleaved with the property
checks) and the spec's own dispatch (``kvpool.spec.manager.step``).
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
    ManagerState,
    Preempt,
    RequestAction,
    ResetCache,
    Resume,
)

from . import draw
from .draw import busy, evictable, preempted, running


@dataclass(frozen=True)
class RequestOperation:
    """One request operation, as the request machine sees it."""

    action: type[RequestAction]
    #: How often it is drawn in a state, relative to the others; 0 when it cannot be.
    weight: Callable[[ManagerState], int]
    #: Its draw (always inside the contract).
    draw: draw.Drawer

    @property
    def name(self) -> str:
        return self.action.operation


#: Every request operation, in the order the request machine weighs them (its draws depend
#: on it).
REQUEST_OPERATIONS: tuple[RequestOperation, ...] = (
    RequestOperation(Admit, lambda s: 1 if busy(s) else 4, draw.draw_admit),
    RequestOperation(Append, lambda s: 3 if running(s) else 0, draw.draw_append),
    RequestOperation(Compute, lambda s: 6 if running(s) else 0, draw.draw_compute),
    RequestOperation(Preempt, lambda s: 1 if running(s) else 0, draw.draw_preempt),
    RequestOperation(Resume, lambda s: 2 if preempted(s) else 0, draw.draw_resume),
    RequestOperation(
        Finish, lambda s: (4 if busy(s) else 2) if s.requests else 0, draw.draw_finish
    ),
    RequestOperation(ResetCache, lambda s: 1, draw.draw_reset),
    RequestOperation(EvictCached, lambda s: 3 if evictable(s) else 0, draw.draw_evict),
)
