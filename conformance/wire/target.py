"""A program as a :class:`~..engine.target.Target`: each test case's pool is an ``init``
in one long-running program, each action an ``apply``.

The program says in its handshake which operations it offers and what it shows; it is
judged on exactly those, like a Python pool. An operation name ``OPERATION:FIELD`` (as
``free_blocks:evict_first``) says the program takes that optional argument (a field whose
default is ``None`` or ``False``); an action setting one it does not list is never drawn.

Under protocol 2 the runner may say which actions come next (:meth:`WireTarget.take_plan`: a
replayed trace, a shrinking attempt, an action and the events it publishes, the steps a
drawn test case takes if the target answers as the spec predicts): they go to the program
in batches of at most :data:`BATCH_ACTIONS`, and each later ``apply`` of the same action is
answered from a batch's steps. The next batch is sent as soon as the one before is
answered, so the program computes it while the suite judges the steps it has. When the
runner then applies something else (it skipped an action, a refusal ended the pair early,
the target answered otherwise than predicted), the program's pool has taken actions the
runner did not apply: a fresh pool is started in the program and given the actions
applied so far, and the next ones, in batches; the replayed steps must answer as they did
the first time (a program that does not is not deterministic, and replay and shrinking
need it to be).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

from kvpool.spec import Action, Observation, PoolConfig, Profile

from ..machines.pool.refusal import RefusedByReturn
from ..machines.pool.target import PoolView
from .child import BatchUnanswered
from .codec import Refusal, optional_arguments_set
from .session import BATCH_ACTIONS, Ahead, Posted, Session, Step

#: At most this many batches sent to a program wait for their replies (one computed while
#: the suite judges the steps of the one before, one more queued).
FLIGHTS = 2


class WireRefusal(RefusedByReturn):
    """The program refused an action (an outcome ``Refused``): the pool's own answer,
    judged like an exception a Python pool raises."""

    def __init__(self, operation: str, reason: str) -> None:
        super().__init__(operation, reason)
        self.args = (f"{operation} refused by the program: {reason}",)


class WireTarget:
    """One pool inside the program of ``session``."""

    def __init__(
        self,
        session: Session,
        config: PoolConfig,
        profile: Profile,
        first: Sequence[Action] = (),
        then: Sequence[Ahead] = (),
    ) -> None:
        """``then``: the next pools of the run, in order, started in the program ahead
        (:meth:`start_ahead`) once this one has sent all it was told."""
        self.session = session
        self.config, self.profile = config, profile
        hello, self.current = session.init(config, profile.name, first=first)
        self.generation = session.generation
        self.name = hello.name
        self.operations = hello.operations
        self.observes = hello.observes
        self.problems: tuple[str, ...] = ()
        #: The actions the runner applied, each with its outcome (what a rebuilt pool
        #: must answer again).
        self.taken: list[tuple[Action, Observation | Refusal]] = []
        #: Actions the program has taken and answered, not yet applied by the runner.
        self.ahead: deque[tuple[Action, Step]] = deque()
        #: The batches sent whose replies are not read yet, with their actions, oldest
        #: first (after ``ahead``).
        self.flights: deque[tuple[Posted, list[Action]]] = deque()
        #: The actions the runner said come next, after those: not yet sent.
        self.planned: deque[Action] = deque()
        #: Whether the program's pool took actions the runner will not apply (a plan
        #: replaced): it is rebuilt at the next action sent.
        self.behind = False
        # none start ahead of ``first`` actions not sent with the init (the program's
        # first init, before it said it takes batches)
        self.then = then if session.first is not None or not first else ()
        if session.first is not None:  # the ``first`` actions, sent with the init
            self.flights.append(session.first)
            self.planned.extend(first[len(session.first[1]) :])
        self.launch()

    def takes(self, action: Action) -> bool:
        """Whether the program takes every optional argument ``action`` sets."""
        return all(
            f"{action.operation}:{name}" in self.operations
            for name in optional_arguments_set(action)
        )

    @property
    def plan(self) -> Callable[[Sequence[Action]], None] | None:
        """The ``plan`` hook: :meth:`take_plan` under protocol 2; ``None`` for a program
        that takes one action a message (protocol 1), so that the runner draws no step
        ahead for it."""
        return self.take_plan if self.session.batches else None

    def take_plan(self, actions: Sequence[Action]) -> None:
        """The actions the runner applies next, in order (each still comes by
        :meth:`apply`), taken in batches under protocol 2. Actions already said
        (sent or not) that begin ``actions`` are not said again, and ``actions`` that
        begin those said change nothing; other ``actions`` replace all that was said (the
        program's pool is then rebuilt at the next :meth:`apply`, if it took any of it)."""
        if not actions or not self.session.batches:
            return
        said = chain((a for a, _ in self.ahead), *(f[1] for f in self.flights), self.planned)
        agree = 0
        for given, known in zip(actions, said):  # noqa: B905  (either may be the shorter)
            if given != known:
                break
            agree += 1
        if agree == len(actions):
            return  # said already
        if agree == self.said_count():
            self.planned.extend(actions[agree:])
            if (self.ahead or self.flights) and not self.behind:
                self.launch()  # else sent with the next apply
            return
        self.behind = self.behind or self.said_count() > len(self.planned)
        self.ahead.clear()
        self.flights.clear()  # their replies are read (and dropped) by the next init
        self.planned = deque(actions)

    def said_count(self) -> int:
        """How many actions were said and not applied yet."""
        return len(self.ahead) + sum(len(f[1]) for f in self.flights) + len(self.planned)

    def apply(self, action: Action) -> Observation:
        self.check_current()
        try:
            if not self.ahead and self.flights and self.flights[0][1][0] == action:
                self.land()
            if self.ahead and self.ahead[0][0] == action:
                step = self.ahead.popleft()[1]
                self.launch()
            else:
                step = self.send(action)
            self.start_ahead()
        except BatchUnanswered:
            step = self.again(action)
        self.taken.append((action, step.outcome))
        self.current = step.view
        self.problems = step.problems
        if isinstance(step.outcome, Refusal):
            raise WireRefusal(action.operation, str(step.outcome))
        return step.outcome

    def launch(self) -> None:
        """Send planned actions in batches (of :data:`~.session.BATCH_ACTIONS` at most)
        whose replies are read when the runner comes to them, at most :data:`FLIGHTS`
        waiting (none of one action alone, with nothing before it: an ``apply`` sends
        that)."""
        planned, flights = self.planned, self.flights
        while (
            planned
            and len(flights) < FLIGHTS
            and (len(planned) > 1 or self.ahead or flights)
            and not self.superseded  # the program's next message is a next pool's
        ):
            batch = [planned.popleft() for _ in range(min(BATCH_ACTIONS, len(planned)))]
            flights.append((self.session.post_batch(batch), batch))

    def start_ahead(self) -> None:
        """Once this pool has sent all it was told: start the next pools of the run in the
        program (:meth:`~.session.Session.start_ahead`). Done as an action is applied, so
        that a program that stops answering meanwhile is met as :meth:`apply` meets it."""
        if self.then and not self.planned and not self.behind:
            then, self.then = self.then, ()
            self.session.start_ahead(then)

    @property
    def superseded(self) -> bool:
        """Whether next pools were started after this one's messages: this pool's program
        takes nothing more (the next action sent rebuilds it, dropping the next pools)."""
        return bool(self.session.upcoming)

    def land(self) -> None:
        """Read the oldest batch waiting into :attr:`ahead`, and send the next ones."""
        posted, actions = self.flights.popleft()
        self.ahead.extend(zip(actions, self.session.collect_batch(posted), strict=True))
        self.launch()

    def send(self, action: Action) -> Step:
        """The program's step for ``action``, sent with the planned actions after it (or
        after the steps already taken, in a fresh pool, when the program is ahead)."""
        said = [a for a, _ in self.ahead] + [a for f in self.flights for a in f[1]]
        said += self.planned
        at = next((at for at, queued in enumerate(said) if queued == action), None)
        # the runner skipped the actions before it, or it is none of those said
        self.planned = deque(said[at + 1 :] if at is not None else ())
        behind = self.behind or bool(self.ahead) or bool(self.flights) or self.superseded
        self.ahead.clear()
        self.flights.clear()  # their replies are read (and dropped) by the next init
        self.behind = False
        if behind:
            first = self.rebuild(action)
        elif self.planned:
            self.planned.appendleft(action)
            self.launch()
            self.land()
            first = self.ahead.popleft()[1]
        else:
            first = self.session.apply(action)
        self.launch()
        return first

    def rebuild(self, action: Action) -> Step:
        """A fresh pool in the program, given the actions taken so far, ``action`` and
        planned ones after it, in batches: the step of ``action``."""
        self.session.init(self.config, self.profile.name)
        self.generation = self.session.generation
        queue = [a for a, _ in self.taken] + [action]
        room = -len(queue) % BATCH_ACTIONS  # the last batch filled with planned actions
        queue += [self.planned.popleft() for _ in range(min(room, len(self.planned)))]
        steps: list[Step] = []
        for start in range(0, len(queue), BATCH_ACTIONS):
            chunk = queue[start : start + BATCH_ACTIONS]
            steps += self.session.batch(chunk) if len(chunk) > 1 else [self.session.apply(chunk[0])]
        for number, ((taken, outcome), step) in enumerate(zip(self.taken, steps, strict=False)):
            self.check_same(number, taken, outcome, step.outcome)
        done = len(self.taken)
        self.ahead.extend(zip(queue[done + 1 :], steps[done + 1 :], strict=True))
        return steps[done]

    def again(self, action: Action) -> Step:
        """After the program answered nothing to a batch (it may have stopped at an
        action the runner never comes to): the program started again
        (:meth:`~.session.Session.restart`), a fresh pool given the actions taken so far,
        then ``action``, one a message from then on: the step of ``action``."""
        self.session.restart()
        self.ahead.clear()
        self.flights.clear()
        self.behind = False
        self.planned.clear()
        self.session.init(self.config, self.profile.name)
        self.generation = self.session.generation
        for number, (taken, outcome) in enumerate(self.taken):
            self.check_same(number, taken, outcome, self.session.apply(taken).outcome)
        return self.session.apply(action)

    def check_same(
        self, number: int, action: Action, first: Observation | Refusal, again: Any
    ) -> None:
        """The program answered ``action`` (the ``number``-th taken) as the first time
        in a fresh pool, or is not deterministic."""
        if not _same(first, again):
            raise self.session.fail(
                "the program is not deterministic: given the same actions again in a "
                f"fresh pool, it answered action {number + 1} ({action.operation}) with "
                f"{again!r}, not {first!r}"
            )

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
