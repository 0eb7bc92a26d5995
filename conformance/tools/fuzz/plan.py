"""What a campaign runs: the target, the machines and how each round is drawn.

A :class:`CampaignPlan` is plain data, so it crosses into every worker process; each worker
loads the target itself from the plan's names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobSpec:
    """One machine a campaign cycles through: ``pool`` at a level (safety, order,
    robustness), or ``requests`` on the target's ``pool`` or its ``manager``."""

    machine: str
    level: str

    @property
    def label(self) -> str:
        """``pool/safety``, ``requests/manager``: the job's name in tables."""
        return f"{self.machine}/{self.level}"


@dataclass(frozen=True)
class DatabaseSpec:
    """Where the campaign keeps the failing examples it finds: a directory on this machine,
    and optionally a Redis server shared with workers on other machines."""

    directory: str
    redis_url: str | None = None

    def describe(self) -> str:
        """``.kvpool-fuzz`` or ``.kvpool-fuzz + redis://host:6379/0``, for the header."""
        return self.directory + (f" + {self.redis_url}" if self.redis_url else "")


@dataclass(frozen=True)
class CampaignPlan:
    """Everything a worker needs to run its part of a campaign."""

    target: str
    profile: str
    #: The manager the ``requests/manager`` job checks (``none`` when there is none).
    manager: str
    jobs: tuple[JobSpec, ...]
    #: Most actions per test case.
    steps: int
    #: Largest pool the pool machine draws, and the request machine (which needs room).
    blocks: int
    request_blocks: int
    #: Test cases Hypothesis draws per round before the worker moves to the next job.
    examples_per_round: int
    trace_dir: str
    database: DatabaseSpec
    #: The campaign's seed: each worker derives a fresh seed for every round from it.
    seed: int
    shrink_seconds: float = 20.0

    def max_blocks(self, job: JobSpec) -> int:
        return self.request_blocks if job.machine == "requests" else self.blocks
