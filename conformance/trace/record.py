"""Recording a replay step by step: what the spec expected, what the target gave, and the
spec's state after each action, as ITF JSON values ready for a trace file."""

from __future__ import annotations

from typing import Any

from kvpool.spec import (
    Action,
    PoolState,
    get_profile,
)
from kvpool.spec.manager import ManagerResult, ManagerState, manager_step

from ..engine.levels import level_for
from ..engine.lockstep import LockstepRun, Nonconformance, RunRecord
from ..engine.surface import SurfaceMismatch
from ..manager.manager_run import ManagerRun
from ..manager.pool_run import PoolRequestRun
from ..manager.property_run import PropertyRun
from ..manager.runner import manager_builder, pool_builder
from ..manager.target import RequestSetup
from ..targets.loading import load_manager, load_target
from .model import Trace, TraceMeta, TraceStep
from .outcomes import outcome_json, state_json


def record(
    trace: Trace, target: str | None = None, manager: str | None = None, versus: str | None = None
) -> Trace:
    """Replay ``trace``'s actions on a fresh target (its own, or ``target`` / ``manager``)
    and return it with every step recorded, up to and including the first divergence. A
    diff trace replays pool A (``target`` overrides it) against its pool B (``versus``).

    This loads whatever the trace names: for a trace read from a file, pass the names that
    :func:`.trust.choose` picked (``replay_trace`` does)."""
    meta = trace.meta
    if meta.versus is not None:  # a diff trace: pool A against pool B
        from ..diff.record import record_pair

        return record_pair(trace, target, versus)
    if meta.machine == "pool":
        return _record_pool(trace, target or meta.target)
    return _record_requests(trace, target or meta.target, manager or meta.manager)


def _verdict(exc: Exception) -> str:
    if isinstance(exc, Nonconformance):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _record_pool(trace: Trace, target: str) -> Trace:
    meta = trace.meta
    factory, _ = load_target(target)
    config = meta.config
    assert not isinstance(config, RequestSetup)
    level = level_for(meta.level, meta.consumer)
    run = LockstepRun(factory, get_profile(meta.profile), level, config, RunRecord())
    initial = state_json(run.state)
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


def _record_requests(trace: Trace, target: str, manager: str | None) -> Trace:
    meta = trace.meta
    setup = meta.config
    assert isinstance(setup, RequestSetup)
    profile = get_profile(meta.profile)
    if meta.level == "manager":
        factory, _ = load_manager(manager or "auto", target)
        if factory is None:
            raise ValueError(f"the trace needs a manager, and target {target!r} ships none")
        built = manager_builder(factory, profile, meta.consumer)
        run: ManagerRun | PoolRequestRun = built(setup, RunRecord())
    else:
        pool_factory, _ = load_target(target)
        run = pool_builder(pool_factory, profile, meta.consumer)(setup, RunRecord())
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


__all__ = ["TraceMeta", "record", "state_json"]
