"""Recording a replay step by step: what the spec expected, what the target gave, and the
spec's state after each action, as ITF JSON values ready for a trace file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kvpool.spec import (
    Action,
    PoolState,
    Profile,
    get_profile,
)
from kvpool.spec.manager import ManagerResult, ManagerState, manager_step

from ..machines.pool.fault import fault_of
from ..machines.pool.levels import level_for
from ..machines.pool.lockstep import LockstepRun, Nonconformance, RunRecord, plan_ahead
from ..machines.pool.surface import SurfaceMismatch
from ..machines.requests.manager_run import ManagerRun
from ..machines.requests.pool_run import PoolRequestRun
from ..machines.requests.property_run import PropertyRun
from ..machines.requests.runner import manager_builder, pool_builder
from ..machines.requests.target import RequestSetup
from ..targets.loading import load_manager, load_target
from .model import Trace, TraceMeta, TraceStep
from .outcomes import outcome_json, state_json

T = TypeVar("T")


def record(
    trace: Trace,
    target: str | None = None,
    manager: str | None = None,
    versus: str | None = None,
    profile: Profile | None = None,
) -> Trace:
    """Replay ``trace``'s actions on a fresh target (its own, or ``target`` / ``manager``)
    and return it with every step recorded, up to and including the first divergence. A
    diff trace replays pool A (``target`` overrides it) against its pool B (``versus``).

    This loads whatever the trace names, its profile included (``profile``: the one to
    use instead): for a trace read from a file, pass the names and the profile that
    :func:`.trust.choose` picked (``replay_trace`` does)."""
    meta = trace.meta
    if meta.versus is not None:  # a diff trace: pool A against pool B
        from ..tools.diff.record import record_pair

        return record_pair(trace, target, versus)
    if meta.machine == "pool":
        return _record_pool(trace, target or meta.target, profile or get_profile(meta.profile))
    return _record_requests(
        trace, target or meta.target, manager or meta.manager, profile or get_profile(meta.profile)
    )


class BuildDiverged(Exception):
    """The target diverged (or its own code crashed) before the first action, as it was
    built: a finding about the target, with no step to record it on."""


def _built(build: Callable[[], T]) -> T:
    """``build()``: the run on a fresh target; a difference or a crash of the target's own
    code while it is built is :class:`BuildDiverged` (kvpool's own errors pass through)."""
    try:
        return build()
    except Exception as exc:
        if isinstance(exc, Nonconformance) or fault_of(exc) == "target":
            raise BuildDiverged(f"as the target was built: {_verdict(exc)}") from exc
        raise


def _verdict(exc: Exception) -> str:
    if isinstance(exc, Nonconformance):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _record_pool(trace: Trace, target: str, profile: Profile) -> Trace:
    meta = trace.meta
    factory, _ = load_target(target)
    config = meta.config
    assert not isinstance(config, RequestSetup)
    level = level_for(meta.level, meta.consumer)
    run = _built(lambda: LockstepRun(factory, profile, level, config, RunRecord()))
    initial = state_json(run.state)
    plan_ahead(run.target, trace.actions)  # a program over the wire takes them in a batch
    steps = []
    for action in trace.actions:
        assert isinstance(action, Action)
        verdict = "ok"
        try:
            run.apply(action)
        except SurfaceMismatch:  # the suite cannot drive the target: a usage error, no verdict
            raise
        except Exception as exc:  # a difference, or the adapter failed
            verdict = _verdict(exc)
        expected = outcome_json(action, run.last.expected)
        actual = outcome_json(action, run.last.actual)
        steps.append(TraceStep(action, expected, actual, verdict, state_json(run.state)))
        if verdict != "ok":
            break
    return Trace(meta, trace.actions, tuple(steps), initial)


def _record_requests(trace: Trace, target: str, manager: str | None, profile: Profile) -> Trace:
    meta = trace.meta
    setup = meta.config
    assert isinstance(setup, RequestSetup)
    if meta.level == "manager":
        factory, _ = load_manager(manager or "auto", target)
        if factory is None:
            raise ValueError(f"the trace needs a manager, and target {target!r} ships none")
        built = manager_builder(factory, profile, meta.consumer)
    else:
        pool_factory, _ = load_target(target)
        built = pool_builder(pool_factory, profile, meta.consumer)
    run: ManagerRun | PoolRequestRun = _built(lambda: built(setup, RunRecord()))
    initial = state_json(_pool_of(run), run.state)
    steps = []
    for action in trace.actions:
        before = (_pool_of(run), run.state)
        verdict, expected, actual = "ok", None, None
        try:
            result = run.apply(action)
            expected = actual = outcome_json(action, result)
            if isinstance(run, ManagerRun):
                expected = outcome_json(action, run.last[0])
        except SurfaceMismatch:  # the suite cannot drive the target: a usage error, no verdict
            raise
        except Exception as exc:  # a difference, or the target failed
            verdict = _verdict(exc)
            # a manager judged by the properties alone has no spec result to show
            spec = None if isinstance(run, PropertyRun) else _spec_result(before, action)
            expected = outcome_json(action, spec)
            actual = outcome_json(action, _actual_of(run, exc))
        steps.append(
            TraceStep(action, expected, actual, verdict, state_json(_pool_of(run), run.state))
        )
        if verdict != "ok":
            break
    return Trace(meta, trace.actions, tuple(steps), initial)


def _pool_of(run: ManagerRun | PoolRequestRun) -> PoolState:
    return run.pool_state if isinstance(run, ManagerRun) else run.lockstep.state


def _spec_result(before: tuple[PoolState, ManagerState], action: Any) -> ManagerResult | Exception:
    try:
        return manager_step(before[0], before[1], action)[2]
    except Exception as exc:  # the action is outside the contract
        return exc


def _actual_of(run: ManagerRun | PoolRequestRun, exc: Exception) -> Any:
    if isinstance(run, ManagerRun) and run.last[1] is not None:
        return run.last[1]
    return exc


__all__ = ["BuildDiverged", "TraceMeta", "record", "state_json"]
