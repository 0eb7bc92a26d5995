"""A campaign's jobs as a worker runs them: the test cases to draw, the record of what it
ran, how a failure is shrunk, and the database key its failures are kept under."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvpool.spec import PoolConfig, Profile, get_profile

from ...machines.pool.levels import LEVELS, Level
from ...machines.pool.lockstep import RunRecord
from ...machines.pool.machine import pool_case
from ...machines.pool.runner import Failure, shrink_failure
from ...machines.pool.target import TargetFactory
from ...machines.requests.machine import RunBuilder, request_case
from ...machines.requests.runner import (
    ON_MANAGER,
    ON_POOL,
    manager_builder,
    pool_builder,
    shrink_request_failure,
)
from ...targets.loading import load_manager, load_target
from .database import database_key
from .hunt import Cases
from .plan import CampaignPlan, JobSpec

#: Builds the test cases of one round from the failure kinds to drop and the callback
#: called as each test case starts.
CasesBuilder = Callable[[frozenset[str], Callable[[RunRecord], None]], Cases]


@dataclass
class Job:
    """One job of a worker. ``record`` adds up everything the job ran in this worker."""

    spec: JobSpec
    level: Level
    key: bytes
    record: RunRecord
    cases: CasesBuilder
    shrink: Callable[[Failure], Failure]


@dataclass(frozen=True)
class Loaded:
    """The target of a campaign, loaded in a worker."""

    profile: Profile
    factory: TargetFactory
    manager: Any
    #: The pool's release (a vLLM target's version), for the traces' metadata.
    version: str | None


def load(plan: CampaignPlan) -> Loaded:
    profile = get_profile(plan.profile)
    factory, _ = load_target(plan.target)
    manager, _ = load_manager(plan.manager, plan.target)
    probe = factory(PoolConfig(2), profile)
    return Loaded(profile, factory, manager, getattr(probe, "version", None))


def build_jobs(plan: CampaignPlan, loaded: Loaded) -> list[Job]:
    """The plan's jobs, ready to run in this process."""
    return [_build(plan, loaded, spec) for spec in plan.jobs]


def job_level(spec: JobSpec) -> Level:
    """The level a job runs at: a pool level, or the request machine's run on the pool
    or on the manager."""
    if spec.machine == "pool":
        return LEVELS[spec.level]
    return ON_MANAGER if spec.level == "manager" else ON_POOL


def _build(plan: CampaignPlan, loaded: Loaded, spec: JobSpec) -> Job:
    record = RunRecord()
    blocks = plan.max_blocks(spec)
    key = database_key(plan, spec)
    level = job_level(spec)
    if spec.machine == "pool":
        start = pool_case(loaded.factory, loaded.profile, level, blocks)

        def pool_cases(known: frozenset[str], tick: Callable[[RunRecord], None]) -> Cases:
            return Cases(start, known, tick)

        def pool_shrink(failure: Failure) -> Failure:
            return shrink_failure(
                loaded.factory, loaded.profile, level, failure, plan.shrink_seconds
            )

        return Job(spec, level, key, record, pool_cases, pool_shrink)
    build: RunBuilder = (
        manager_builder(loaded.manager, loaded.profile)
        if level is ON_MANAGER
        else pool_builder(loaded.factory, loaded.profile)
    )

    requests_start = request_case(build, blocks)

    def requests_cases(known: frozenset[str], tick: Callable[[RunRecord], None]) -> Cases:
        return Cases(requests_start, known, tick)

    def requests_shrink(failure: Failure) -> Failure:
        return shrink_request_failure(build, failure, plan.shrink_seconds)

    return Job(spec, level, key, record, requests_cases, requests_shrink)
