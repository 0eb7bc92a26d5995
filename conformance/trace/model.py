"""A trace in memory: what ran, on what, and what each step gave."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from kvpool.spec import ALL_ACTIONS, PoolConfig
from kvpool.spec.manager import REQUEST_ACTIONS

from ..machines.requests.target import RequestSetup

#: Any action a trace may hold: a pool action or a request action.
AnyAction = Union[tuple(ALL_ACTIONS + REQUEST_ACTIONS)]  # type: ignore[valid-type]  # noqa: UP007
#: What a trace runs on: a pool, or a manager over a pool.
AnyConfig = PoolConfig | RequestSetup

FORMAT_VERSION = 1


@dataclass(frozen=True)
class TraceMeta:
    """Where a trace came from, enough to replay it: ``machine`` is ``pool`` (at
    ``level`` safety/order/robustness/events) or ``requests`` (``level`` pool or manager).

    A diff trace (``kvpool diff``) runs ``target`` (pool A) against ``versus`` (pool B)
    instead of against the spec; its ``expected`` outcomes are A's, its ``actual`` B's.
    """

    target: str
    profile: str
    machine: str
    level: str
    config: AnyConfig
    seed: int | None = None
    manager: str | None = None
    target_version: str | None = None
    kvpool_version: str = ""
    message: str = ""
    #: Pool B of a diff trace, its profile and its release (``None`` for other traces).
    versus: str | None = None
    versus_profile: str | None = None
    versus_version: str | None = None
    #: The consumer model of an ``events`` trace (``count`` or ``set``; ``None`` otherwise).
    consumer: str | None = None


@dataclass(frozen=True)
class TraceStep:
    """One step as recorded: the action and, as ITF JSON values, what the spec expected,
    what the target gave, the spec's state after it, and the verdict (``ok`` or why not)."""

    action: Any
    expected: Any = None
    actual: Any = None
    verdict: str = "ok"
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Trace:
    meta: TraceMeta
    actions: tuple[Any, ...]
    #: Recorded steps (empty until recorded); ``initial`` is the state before the first.
    steps: tuple[TraceStep, ...] = ()
    initial: dict[str, Any] = field(default_factory=dict)

    @property
    def diverging_step(self) -> int | None:
        """The 1-based index of the step whose verdict is not ``ok``, if any."""
        for i, s in enumerate(self.steps, 1):
            if s.verdict != "ok":
                return i
        return None
