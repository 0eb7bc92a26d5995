"""Running the request machine against a manager or a pool, and shrinking what fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kvpool.spec import Profile
from kvpool.spec.manager import request_violation

from ...search.shrink import Replay, shrink_sequence
from ..pool.levels import Level, level_for
from ..pool.lockstep import RunRecord, replay_actions
from ..pool.runner import Failure, LevelResult, run_seeded
from .machine import RequestRun, RunBuilder, request_case
from .target import RequestSetup

#: The request machine's two runs, named by what they drive.
ON_POOL = Level(
    "pool",
    "the spec's manager drives the pool under test (pool calls compared at the safety level)",
    exact_order=False,
    out_of_contract=False,
)
ON_MANAGER = Level(
    "manager",
    "the manager under test beside the spec's manager (tables and pools compared exactly)",
    exact_order=True,
    out_of_contract=False,
)


def replay_requests(
    build: RunBuilder, setup: RequestSetup, actions: list[Any], skip_out_of_contract: bool
) -> tuple[str | None, list[Any]]:
    """Run request ``actions`` on a fresh run; the first difference and the actions run."""
    try:
        run: RequestRun = build(setup, RunRecord())
    except Exception as exc:  # the target could not even be built
        return f"{type(exc).__name__}: {exc}", []

    def skip(action: Any) -> bool:
        return skip_out_of_contract and (
            request_violation(run.state, action) is not None or not run.allows(action)
        )

    return replay_actions(run.apply, actions, skip)


def smaller_setups(setup: RequestSetup) -> list[RequestSetup]:
    """Simpler managers to try: fewer groups, then fewer blocks."""
    candidates = []
    groups = setup.manager.groups
    if len(groups) > 1:
        for g in range(len(groups)):
            fewer = groups[:g] + groups[g + 1 :]
            candidates.append(replace(setup, manager=replace(setup.manager, groups=fewer)))
    candidates += [
        replace(setup, pool=replace(setup.pool, num_gpu_blocks=n))
        for n in range(3, setup.pool.num_gpu_blocks)
    ]
    return candidates


def simpler_request(action: Any) -> list[Any]:
    """Variants of a request action with one token fewer."""
    tokens = getattr(action, "tokens", ())
    if len(tokens) <= 1:
        return []
    return [replace(action, tokens=tokens[:j] + tokens[j + 1 :]) for j in range(len(tokens))]


def shrink_request_failure(build: RunBuilder, failure: Failure, seconds: float) -> Failure:
    """``failure`` of the request machine on runs from ``build``, shrunk (its kind kept)."""

    def replay_on(setup: RequestSetup, skip: bool) -> Replay:
        return lambda actions: replay_requests(build, setup, actions, skip)

    config, trace, message = shrink_sequence(
        replay_on, smaller_setups, simpler_request, failure.config, failure.trace, seconds
    )
    return Failure(message, trace, config)


def run_requests(
    build: RunBuilder,
    level: Level,
    *,
    max_examples: int,
    steps: int,
    seed: int,
    max_blocks: int,
    on_example: Callable[[RunRecord], None] | None = None,
    shrink_seconds: float = 20.0,
    max_findings: int = 1,
    findings_seconds: float = 60.0,
    min_valid: int = 0,
) -> LevelResult:
    """Run the request machine on runs from ``build``; shrink each distinct finding. A last
    search with fewer than ``min_valid`` valid test cases fails the run."""

    def shrunk(failure: Failure) -> Failure:
        return shrink_request_failure(build, failure, shrink_seconds)

    return run_seeded(
        request_case(build, max_blocks),
        RunRecord(),
        level,
        shrunk,
        machine="requests",
        max_examples=max_examples,
        steps=steps,
        seed=seed,
        on_example=on_example,
        max_findings=max_findings,
        findings_seconds=findings_seconds,
        min_valid=min_valid,
    )


def manager_builder(factory: Any, profile: Profile, consumer: str | None = None) -> RunBuilder:
    """Runs of managers from ``factory``; with ``consumer``, a manager judged by the
    properties alone also has its own KV events judged by that consumer model (events on
    in every setup)."""
    from .manager_run import ManagerRun
    from .property_run import PropertyRun, checked_by_properties

    if consumer is not None:
        if not checked_by_properties(factory):
            raise ValueError("only a manager judged by the properties publishes its own events")

        def judged(setup: RequestSetup, record: RunRecord) -> PropertyRun:
            pool = replace(setup.pool, enable_kv_cache_events=True)  # events on, as traced
            return PropertyRun(factory, profile, replace(setup, pool=pool), record, consumer)

        return judged
    run = PropertyRun if checked_by_properties(factory) else ManagerRun
    return lambda setup, record: run(factory, profile, setup, record)


def pool_builder(factory: Any, profile: Profile, consumer: str | None = None) -> RunBuilder:
    """Runs of the spec's manager on pools from ``factory``; with ``consumer``, each pool
    call is also judged at the events level by that consumer model."""
    from .pool_run import PoolRequestRun

    if consumer is None:
        return lambda setup, record: PoolRequestRun(factory, profile, setup, record)
    level = level_for("events", consumer)

    def judged(setup: RequestSetup, record: RunRecord) -> PoolRequestRun:
        pool = replace(setup.pool, enable_kv_cache_events=True)  # events on, as traced
        return PoolRequestRun(factory, profile, replace(setup, pool=pool), record, level)

    return judged


def events_on_pool(consumer: str) -> Level:
    """The request machine's run on the pool, its pool calls judged by ``consumer`` too."""
    return replace(ON_POOL, consumer=consumer)


def events_on_manager(consumer: str) -> Level:
    """The request machine's run of a manager that publishes its own events (one with no
    pool API), its stream judged by ``consumer`` after every request action."""
    return replace(ON_MANAGER, consumer=consumer)
