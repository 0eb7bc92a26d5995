"""The Hypothesis machine that draws request actions for a manager run or a pool run."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from kvpool.spec.manager import RequestAction

from ..engine.lockstep import RunRecord
from ..engine.machine import apply_in_case, count_valid
from . import draw
from .manager_run import ManagerRun
from .pool_run import PoolRequestRun
from .target import RequestSetup

RequestRun = ManagerRun | PoolRequestRun
#: Builds the run for one test case.
RunBuilder = Callable[[RequestSetup, RunRecord], RequestRun]


def request_machine(
    build: RunBuilder,
    max_blocks: int,
    record: RunRecord,
    on_example: Callable[[RunRecord], None] | None = None,
    name: str = "Requests",
    known: frozenset[str] = frozenset(),
) -> type[RuleBasedStateMachine]:
    """A machine class running request actions through runs from ``build``; a test case
    that runs into a finding in ``known`` is dropped."""

    class Requests(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            record.examples += 1
            self.steps_before = record.steps
            if on_example is not None:
                on_example(record)

        @initialize(setup=draw.setups(max_blocks))
        def build(self, setup: RequestSetup) -> None:
            self.run = build(setup, record)
            taken: frozenset[str] = getattr(self.run, "extra_keys_taken", frozenset())
            self.ctx = draw.RequestContext(extra_keys=frozenset(taken))

        def apply(self, action: RequestAction) -> None:
            apply_in_case(self.run.apply, action, known, record)

        def teardown(self) -> None:
            count_valid(record, self.steps_before)

        @rule(data=st.data())
        def act(self, data: st.DataObject) -> None:
            """Draw the next kind of request action (weighted), then the action, and run it."""
            state = self.run.state
            self.ctx.remember(state)
            kinds = [op for op, (weight, _) in draw.DRAWERS.items() for _ in range(weight(state))]
            kind = data.draw(st.sampled_from(kinds), label="request operation")
            _, drawer = draw.DRAWERS[kind]
            action = drawer(data, state, self.ctx)
            if self.run.allows(action):
                self.apply(action)
            else:
                record.skipped += 1

    Requests.__name__ = Requests.__qualname__ = name
    return Requests
