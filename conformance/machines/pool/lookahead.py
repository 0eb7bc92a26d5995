"""Drawing a test case's next steps ahead of its run, for a target that takes several
actions at once (one with :data:`~.target.PLAN`: the wire protocol's batches).

A drawn test case's next action depends on the spec's state, and at the levels with set
semantics the spec adopts the blocks the target chose; so its steps cannot be known before
the target has answered. But a target that conforms answers as the spec predicts. The look
ahead draws the coming steps from the states the spec predicts, with the search's own
choices and drawing context, and says them to the target
(:meth:`~.lockstep.LockstepRun.plan`), which sends them in batches and computes them while
the run judges the steps before.

The run takes a step drawn ahead only when its state is the one the step was drawn from;
the draw then is the one it would have made itself (a draw reads the state, the context
and the choices alone). Otherwise (the target chose other blocks, a known finding changed
the state) the look ahead rewinds: the choices and the context go back to where the run
is, by drawing again from a mark saved before the draws ahead, the steps drawn past it are
dropped (the wire target rebuilds its pool), and the run draws its step itself; the next
look aheads reach half as far, so a pool the spec keeps mispredicting is soon driven one
step at a time. A step that raises (a finding, a dropped test case) rewinds too, and no
draw goes past the test case's last step, so the choices are where they would have been
without a look ahead when the test case ends: the same test cases, findings and traces.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from kvpool.spec import Action, PoolState, TakeEvents, violation

from ...search.choices import Choices, RandomChoices
from . import draw
from .contracts import spec_step
from .levels import Level
from .lockstep import TAKE, LockstepRun

#: A test case's draw of its next step: the action, or ``None`` for a step that runs nothing.
Draw = Callable[[Choices, PoolState, draw.Context], Action | None]

#: How many steps ahead the look ahead draws, at first (the wire sends at most 32
#: actions a batch: one batch judged while the next is computed).
REACH = 32


class Reach:
    """How far the look aheads of one run draw: halved at each step they guessed wrong
    and at each test case a finding ended (a pool with a known finding meets it in most
    test cases), none below 4; doubled, up to :data:`REACH`, by a test case that ran to
    its end as drawn ahead. After :data:`REST` test cases without, one tries again."""

    def __init__(self) -> None:
        self.steps = REACH
        self.rested = 0

    def missed(self) -> None:
        self.steps = self.steps // 2 if self.steps >= 8 else 0

    def ran(self) -> None:
        """A test case ran to its end, each step as drawn ahead."""
        self.steps = min(REACH, self.steps * 2)

    def ready(self) -> bool:
        """Whether the next test case draws ahead."""
        if not self.steps:
            self.rested += 1
            if self.rested >= REST:
                self.steps, self.rested = 4, 0
        return bool(self.steps)


#: How many test cases a run drives one step at a time, once its look aheads guessed
#: wrong down to none, before it tries again.
REST = 16


@dataclass
class Mark:
    """Where a stretch of draws ahead began: the choices' and the context's state there,
    and each step drawn since (the state it was drawn from, what it drew)."""

    choices: tuple[object, ...]
    ctx: draw.Context
    drawn: list[tuple[PoolState, Action | None]] = field(default_factory=list)
    #: How many of ``drawn`` the run has taken.
    taken: int = 0


class Lookahead:
    """The steps one test case (of ``steps`` steps) draws, ahead of its run."""

    def __init__(
        self,
        run: LockstepRun,
        level: Level,
        draw_step: Draw,
        choices: RandomChoices,
        ctx: draw.Context,
        steps: int,
        reach: Reach,
    ) -> None:
        self.run, self.level, self.reach = run, level, reach
        self.draw_step = draw_step
        self.choices, self.ctx = choices, ctx
        #: The steps of the test case not drawn yet, ahead or by the run.
        self.left = steps
        #: Whether a step of this test case was not the one drawn ahead.
        self.missed = False
        #: The stretches drawn ahead, oldest first; the run is in the first.
        self.marks: deque[Mark] = deque()
        #: The state after the last step drawn ahead, as the spec predicts it.
        self.state: PoolState | None = None

    def next(self) -> Action | None:
        """The run's next step: the one drawn ahead when the run is in the state it was
        drawn from, else drawn now (``None``: a step that runs nothing)."""
        mark = self.marks[0] if self.marks else None
        if mark is not None and mark.taken == len(mark.drawn) and len(self.marks) > 1:
            self.marks.popleft()
            mark = self.marks[0]
        if mark is not None and mark.taken < len(mark.drawn):
            state, action = mark.drawn[mark.taken]
            if state is self.run.state or state == self.run.state:
                mark.taken += 1
                coming = self.coming()
                if coming * 2 <= self.reach.steps:
                    self.extend(action)
                elif not coming and not self.left and not self.missed:
                    self.reach.ran()
                return action
            self.rewind()
            self.reach.missed()
            self.missed = True
        self.marks.clear()  # every step drawn ahead is taken: the choices are the run's
        action = self.draw_step(self.choices, self.run.state, self.ctx)
        self.left -= 1
        if self.reach.steps:
            self.state = self.predict(self.run.state, action)
            self.extend(action)
        return action

    def coming(self) -> int:
        """How many steps are drawn ahead that the run has not taken."""
        return sum(len(m.drawn) - m.taken for m in self.marks)

    def extend(self, action: Action | None) -> None:
        """Draw ahead up to the reach (not past the test case's end) and say to the
        target what comes after ``action``, the step the run takes now."""
        assert self.state is not None
        coming = self.coming()
        more = min(self.reach.steps, self.left + coming) - coming
        if more <= 0:
            return
        mark = Mark(self.choices.rng.getstate(), self.ctx.fork())
        self.marks.append(mark)
        state = self.state
        for _ in range(more):
            drawn = self.draw_step(self.choices, state, self.ctx)
            mark.drawn.append((state, drawn))
            state = self.predict(state, drawn)
        self.left -= more
        self.state = state
        ahead = [a for m in self.marks for _, a in m.drawn[m.taken :] if a is not None]
        self.run.plan(ahead if action is None else [action, *ahead])

    def rewind(self) -> None:
        """Put the choices and the context back where the run is (after the last step it
        took), dropping the steps drawn past it."""
        if not self.marks:
            return
        mark = self.marks[0]
        self.left += self.coming()
        self.marks.clear()
        self.state = None
        self.choices.rng.setstate(mark.choices)
        self.ctx.__dict__.update(mark.ctx.__dict__)
        for state, action in mark.drawn[: mark.taken]:
            again = self.draw_step(self.choices, state, self.ctx)
            if again != action:
                raise RuntimeError(f"a look ahead drew {again!r} again where it drew {action!r}")

    def predict(self, state: PoolState, action: Action | None) -> PoolState:
        """The spec's state after ``action`` (and the events taken after it, at the events
        level), as a run reaches it when the target answers as the spec does."""
        if action is None or violation(state, action) is not None:
            return state  # nothing run, or refused: the pool as it was
        state = spec_step(state, action)[0]
        if self.level.consumer is not None and not isinstance(action, TakeEvents):
            state = spec_step(state, TAKE)[0]
        return state
