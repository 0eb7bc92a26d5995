"""A program as a :class:`~..engine.target.Target`: each test case's pool is an ``init``
in one long-running program, each action an ``apply``.

The program says in its handshake which operations it offers and what it shows; it is
judged on exactly those, like a Python pool. An operation name ``OPERATION:FIELD`` (as
``free_blocks:evict_first``) says the program takes that optional argument (a field whose
default is ``None`` or ``False``); an action setting one it does not list is never drawn.
"""

from __future__ import annotations

from kvpool.spec import Action, Observation, PoolConfig, Profile

from ..engine.refusal import RefusedByReturn
from ..engine.target import PoolView
from .codec import Refusal, optional_arguments_set
from .session import Session


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
        hello, self.current = session.init(config, profile.name)
        self.generation = session.generation
        self.name = hello.name
        self.operations = hello.operations
        self.observes = hello.observes
        self.problems: tuple[str, ...] = ()

    def takes(self, action: Action) -> bool:
        """Whether the program takes every optional argument ``action`` sets."""
        return all(
            f"{action.operation}:{name}" in self.operations
            for name in optional_arguments_set(action)
        )

    def apply(self, action: Action) -> Observation:
        self.check_current()
        step = self.session.apply(action)
        self.current = step.view
        self.problems = step.problems
        if isinstance(step.outcome, Refusal):
            raise WireRefusal(action.operation, str(step.outcome))
        return step.outcome

    def view(self) -> PoolView:
        self.check_current()
        return self.current

    def structure_problems(self) -> list[str]:
        return list(self.problems)

    def check_current(self) -> None:
        self.session.check(self.generation)
