"""A program as a :class:`~..engine.target.Target`: each test case's pool is an ``init``
in one long-running program, each action an ``apply``.

The program says in its handshake which operations it offers and what it shows; it is
judged on exactly those, like a Python pool. An operation name ``OPERATION:FIELD`` (as
``free_blocks:evict_first``) says the program takes that optional argument (a field whose
default is ``None`` or ``False``); an action setting one it does not list is never drawn.

Under protocol 2 the runner may say which actions come next (:meth:`WireTarget.plan`: a
replayed trace, a shrinking attempt, an action and the events it publishes): they go to
the program in one ``batch``, and each later ``apply`` of the same action is answered from
that batch's steps. When the runner then applies something else (it skipped an action, or
a refusal ended the pair early), the program's pool has taken actions the runner did not
apply: a fresh pool is started in the program and given the actions applied so far, and
the next ones, in one batch; the replayed steps must answer as they did the first time
(a program that does not is not deterministic, and replay and shrinking need it to be).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from kvpool.spec import Action, Observation, PoolConfig, Profile

from ..machines.pool.refusal import RefusedByReturn
from ..machines.pool.target import PoolView
from .codec import Refusal, optional_arguments_set
from .session import Session, Step


class WireRefusal(RefusedByReturn):
    """The program refused an action (an outcome ``Refused``): the pool's own answer,
    judged like an exception a Python pool raises."""

    def __init__(self, operation: str, reason: str) -> None:
        super().__init__(operation, reason)
        self.args = (f"{operation} refused by the program: {reason}",)


class WireTarget:
    """One pool inside the program of ``session``."""

    def __init__(self, session: Session, config: PoolConfig, profile: Profile) -> None:
        self.session = session
        self.config, self.profile = config, profile
        hello, self.current = session.init(config, profile.name)
        self.generation = session.generation
        self.name = hello.name
        self.operations = hello.operations
        self.observes = hello.observes
        self.problems: tuple[str, ...] = ()
        #: The actions the runner applied, each with its outcome (what a rebuilt pool
        #: must answer again).
        self.taken: list[tuple[Action, Observation | Refusal]] = []
        #: The actions the runner said come next, not yet sent.
        self.planned: list[Action] = []
        #: Actions the program has taken and answered, not yet applied by the runner.
        self.ahead: deque[tuple[Action, Step]] = deque()

    def takes(self, action: Action) -> bool:
        """Whether the program takes every optional argument ``action`` sets."""
        return all(
            f"{action.operation}:{name}" in self.operations
            for name in optional_arguments_set(action)
        )

    def plan(self, actions: Sequence[Action]) -> None:
        """The actions the runner applies next, in order (each still comes by
        :meth:`apply`); sent together with the first of them, under protocol 2."""
        if self.session.batches:
            self.planned = list(actions)

    def apply(self, action: Action) -> Observation:
        self.check_current()
        if self.ahead and self.ahead[0][0] == action:
            step = self.ahead.popleft()[1]
        else:
            step = self.send(action)
        self.taken.append((action, step.outcome))
        self.current = step.view
        self.problems = step.problems
        if isinstance(step.outcome, Refusal):
            raise WireRefusal(action.operation, str(step.outcome))
        return step.outcome

    def send(self, action: Action) -> Step:
        """The program's step for ``action``, sent with the planned actions after it (or
        after the steps already taken, in a fresh pool, when the program is ahead)."""
        coming = [action]
        if self.planned and self.planned[0] == action:
            coming = self.planned
        else:
            for at, (queued, _) in enumerate(self.ahead):
                if queued == action:  # the runner skipped the actions before it
                    coming = [a for a, _ in list(self.ahead)[at:]]
                    break
        self.planned = []
        if self.ahead:
            steps = self.rebuild(coming)
        elif len(coming) > 1:
            steps = self.session.batch(coming)
        else:
            steps = [self.session.apply(action)]
        self.ahead = deque(zip(coming[1:], steps[1:], strict=True))
        return steps[0]

    def rebuild(self, coming: list[Action]) -> list[Step]:
        """A fresh pool in the program, given the actions taken so far and then
        ``coming`` in one batch: the steps of ``coming``."""
        self.session.init(self.config, self.profile.name)
        self.generation = self.session.generation
        self.ahead.clear()
        done = [action for action, _ in self.taken]
        steps = self.session.batch(done + coming)
        for number, ((action, outcome), step) in enumerate(zip(self.taken, steps, strict=False)):
            if not _same(outcome, step.outcome):
                raise self.session.fail(
                    "the program is not deterministic: given the same actions again in a "
                    f"fresh pool, it answered action {number + 1} ({action.operation}) with "
                    f"{step.outcome!r}, not {outcome!r}"
                )
        return steps[len(done) :]

    def view(self) -> PoolView:
        self.check_current()
        return self.current

    def structure_problems(self) -> list[str]:
        return list(self.problems)

    def check_current(self) -> None:
        self.session.check(self.generation)


def _same(first: Observation | Refusal, second: Observation | Refusal) -> bool:
    """Whether two outcomes are the same answer (refusals by their reason)."""
    if isinstance(first, Refusal) or isinstance(second, Refusal):
        return type(first) is type(second) and str(first) == str(second)
    return bool(first == second)
