"""Drawing the request machine's test cases for a manager run or a pool run.

:func:`request_case` is a test case of the seeded search (:mod:`..engine.seeded_search`),
which ``kvpool conform`` runs and ``kvpool fuzz`` seeds from Hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable

from kvpool.spec.manager import RequestAction

from ...search.choices import Choices
from ...search.seeded_search import Start, Step
from ..pool.lockstep import RunRecord
from . import draw
from .manager_run import ManagerRun
from .operations import REQUEST_OPERATIONS, named
from .pool_run import PoolRequestRun
from .target import RequestSetup

RequestRun = ManagerRun | PoolRequestRun
#: Builds the run for one test case.
RunBuilder = Callable[[RequestSetup, RunRecord], RequestRun]


def context_of(run: RequestRun) -> draw.RequestContext:
    """What the drawing remembers for ``run``: the attributes and report modes its
    manager takes."""
    taken: frozenset[str] = getattr(run, "extra_keys_taken", frozenset())
    modes: frozenset[str] = getattr(run, "report_modes_taken", frozenset())
    return draw.RequestContext(extra_keys=frozenset(taken), report_modes=frozenset(modes))


def next_request_action(
    choices: Choices, run: RequestRun, ctx: draw.RequestContext
) -> RequestAction:
    """The next request action: its kind (weighted by the state), then the action."""
    state = run.state
    ctx.remember(state)
    kinds = [(op.name, op.weight(state)) for op in REQUEST_OPERATIONS]
    kind = choices.weighted(kinds, "request operation")
    return named(kind).draw(choices, state, ctx)


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
