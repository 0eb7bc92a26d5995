"""The clients' side of an engine test case: what each client knows of its request
(:class:`Client`), and what of a run the machine's action table (:mod:`.operations`) draws
from and acts on (:class:`EngineCase`; :class:`~.engine_run.EngineRun` is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .actions import Abort, Arrive, RunStep
from .driver import EngineDriver, EngineSetup


@dataclass
class Client:
    """A request as its client knows it: what it sent and what it got back."""

    prompt: tuple[int, ...]
    salt: str | None
    max_new_tokens: int
    output: tuple[int, ...] = ()
    #: ``waiting`` (not scheduled since it arrived or was preempted) or ``running``.
    status: str = "waiting"

    @property
    def tokens(self) -> tuple[int, ...]:
        return self.prompt + self.output


class EngineCase(Protocol):
    """An engine test case, as the action table's draws read it and its actions act on it."""

    #: The engine's setup.
    setup: EngineSetup
    #: The engine under test.
    driver: EngineDriver
    #: What the driver declares it offers.
    can: frozenset[str]
    #: The live requests (sent, not finished nor aborted), by id.
    clients: dict[str, Client]
    #: Every request id sent so far.
    sent: set[str]
    #: The finished turns (tokens, salt): the sessions' next turns start from these.
    finished: list[tuple[tuple[int, ...], str | None]]

    def arrive(self, action: Arrive) -> None: ...

    def run_step(self, action: RunStep) -> None: ...

    def abort(self, action: Abort) -> None: ...

    def flush(self) -> None: ...
