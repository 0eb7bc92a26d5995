"""What workers tell the parent process, through one queue."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...machines.pool.runner import Failure
from .plan import JobSpec


@dataclass(frozen=True)
class JobCounts:
    """What one worker ran of one job so far."""

    #: Rounds that drew new test cases, and rounds that replayed the database.
    rounds: int = 0
    replays: int = 0
    #: Test cases started, and lockstep actions run (each on the spec and the target).
    examples: int = 0
    actions: int = 0


@dataclass(frozen=True)
class Progress:
    """A worker's totals so far (each message replaces the worker's previous one)."""

    worker: int
    jobs: dict[str, JobCounts]
    #: Situations reached, by machine (``pool``, ``requests``).
    situations: dict[str, frozenset[str]] = field(default_factory=dict)
    database_errors: int = 0
    last_database_error: str | None = None


@dataclass(frozen=True)
class Found:
    """A failure a worker ran into, shrunk, with its trace written (or already there)."""

    worker: int
    job: JobSpec
    signature: str
    failure: Failure
    #: ``None`` when no trace could be written (``trace_error`` says why).
    trace: str | None
    trace_written: bool
    #: Raised by a replay of the database: someone found it before.
    replayed: bool
    #: Test cases this worker had drawn itself (in all jobs) before it ran into this.
    drawn_before: int
    trace_error: str | None = None


@dataclass(frozen=True)
class Finished:
    """A worker's last message: it stopped (``stopped``: asked to, between rounds;
    ``interrupted``: in the middle of a round)."""

    worker: int
    reason: str


@dataclass(frozen=True)
class Crashed:
    """A worker's last message when kvpool itself failed in it (not the pool under test)."""

    worker: int
    error: str


Message = Progress | Found | Finished | Crashed
