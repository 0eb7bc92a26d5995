"""Drawing the request machine's test cases for a manager run or a pool run.

:func:`request_case` is a test case of the seeded search (``kvpool conform``);
:func:`request_machine` is the same drawing as a Hypothesis machine, for a campaign's
shared example database (``kvpool fuzz``).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from kvpool.spec.manager import RequestAction

from ..engine.choices import Choices, HypothesisChoices
from ..engine.lockstep import RunRecord
from ..engine.machine import apply_in_case, count_valid
from ..engine.seeded_search import Start, Step
from . import draw
from .manager_run import ManagerRun
from .pool_run import PoolRequestRun
from .target import RequestSetup

RequestRun = ManagerRun | PoolRequestRun
#: Builds the run for one test case.
RunBuilder = Callable[[RequestSetup, RunRecord], RequestRun]


def context_of(run: RequestRun) -> draw.RequestContext:
    """What the drawing remembers for ``run``: the attributes its manager takes."""
    taken: frozenset[str] = getattr(run, "extra_keys_taken", frozenset())
    return draw.RequestContext(extra_keys=frozenset(taken))


def next_request_action(
    choices: Choices, run: RequestRun, ctx: draw.RequestContext
) -> RequestAction:
    """The next request action: its kind (weighted by the state), then the action."""
    state = run.state
    ctx.remember(state)
    kinds = [op for op, (weight, _) in draw.DRAWERS.items() for _ in range(weight(state))]
    kind = choices.choice(kinds, "request operation")
    _, drawer = draw.DRAWERS[kind]
    return drawer(choices, state, ctx)


def request_case(build: RunBuilder, max_blocks: int) -> Start:
    """Test cases of the request machine for the seeded search: a manager and pool drawn,
    then one request action drawn and run per step (one the run does not allow counted as
    skipped)."""

    def start(choices: Choices, record: RunRecord) -> Step:
        run = build(draw.request_setup(choices, max_blocks), record)
        ctx = context_of(run)

        def step(choices: Choices) -> None:
            action = next_request_action(choices, run, ctx)
            if run.allows(action):
                run.apply(action)
            else:
                record.skipped += 1

        return step

    return start


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

        @initialize(data=st.data())
        def build(self, data: st.DataObject) -> None:
            setup = draw.request_setup(HypothesisChoices(data), max_blocks)
            self.run = build(setup, record)
            self.ctx = context_of(self.run)

        def apply(self, action: RequestAction) -> None:
            apply_in_case(self.run.apply, action, known, record)

        def teardown(self) -> None:
            count_valid(record, self.steps_before)

        @rule(data=st.data())
        def act(self, data: st.DataObject) -> None:
            """Draw the next request action (see :func:`next_request_action`) and run it."""
            action = next_request_action(HypothesisChoices(data), self.run, self.ctx)
            if self.run.allows(action):
                self.apply(action)
            else:
                record.skipped += 1

    Requests.__name__ = Requests.__qualname__ = name
    return Requests
