"""Checking a target against a vector directory: every vector replayed in lockstep (the spec
re-derives what it expects, so safety vectors accept any eviction order), grouped by the
folder they sit in (profile/operation)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvpool.spec import Action, PoolConfig, Profile, built_in_profile

from ...machines.pool.fault import fault_of
from ...machines.pool.levels import level_for
from ...machines.pool.lockstep import Nonconformance, Replay, replay_each
from ...machines.pool.target import EVICT_FIRST
from ...targets.description import TargetDescription
from ...targets.loading import described, load_target
from ...trace.files import TraceFileError, read_trace
from ...trace.model import Trace
from ...trace.record import BuildDiverged, record


@dataclass
class GroupResult:
    passed: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


def vector_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.itf.json"))


def unsupported(trace: Trace, operations: frozenset[str]) -> str | None:
    """Why the target cannot run ``trace`` (an operation it lacks), or ``None``."""
    for action in trace.actions:
        operation: str = action.operation
        if operation not in operations:
            return operation
        if getattr(action, "evict_first", False) and EVICT_FIRST not in operations:
            return EVICT_FIRST
    return None


def check_vectors(
    directory: Path,
    target: TargetDescription | str,
    profile: str | None = None,
    on_vector: Callable[[Path], None] | None = None,
) -> dict[str, GroupResult]:
    """Replay every vector under ``directory`` (only ``profile``'s, if given) on ``target``.

    ``target`` is the caller's, never a vector's own: a vector names the pool it was
    recorded on, and that name is not loaded. A file that is not a pool-machine trace is
    refused (:class:`TraceFileError`), so nothing else a file names is loaded either.

    The target is loaded once and the vectors are replayed in a row on it
    (:func:`~...machines.pool.lockstep.replay_each`: a program over the wire is sent the
    next ones while one is judged); a vector that fails is replayed again, recorded, for the
    step and the verdict its line names."""
    text = described(target).text
    factory, _ = load_target(target)
    results: dict[str, GroupResult] = {}
    runs: list[tuple[Path, Trace, GroupResult, Replay]] = []
    for path in vector_files(directory):
        group = str(path.parent.relative_to(directory))
        trace = read_trace(path)
        if trace.meta.machine != "pool" or trace.meta.versus is not None:
            kind = "diff" if trace.meta.versus is not None else trace.meta.machine
            raise TraceFileError(
                f"{path} is a {kind} trace, not a test vector: a vector runs the pool machine "
                f"against the spec (replay it with kvpool replay)"
            )
        if profile is not None and trace.meta.profile != profile:
            continue
        result = results.setdefault(group, GroupResult())
        chosen = built_in_profile(trace.meta.profile)  # a vector's field is never a path
        probe = factory(PoolConfig(2), chosen)
        if unsupported(trace, probe.operations) is not None:
            result.skipped += 1
            continue
        config = trace.meta.config
        assert isinstance(config, PoolConfig)  # a pool-machine trace, checked above
        level = level_for(trace.meta.level, trace.meta.consumer)
        actions = [a for a in trace.actions if isinstance(a, Action)]
        runs.append((path, trace, result, Replay(chosen, level, config, actions)))
    done = 0
    while done < len(runs):
        try:
            for found, _ in replay_each(factory, [run[3] for run in runs[done:]]):
                path, trace, result, replayed = runs[done]
                done += 1
                if on_vector is not None:
                    on_vector(path)
                if found is None:
                    result.passed += 1
                else:
                    result.failed.append((path.name, _failure(trace, text, replayed.profile)))
        except Exception as exc:
            if not (isinstance(exc, Nonconformance) or fault_of(exc) == "target"):
                raise  # kvpool's own error
            # the target diverged or failed as it was built: recorded, it says how
            path, trace, result, replayed = runs[done]
            done += 1
            if on_vector is not None:
                on_vector(path)
            result.failed.append((path.name, _failure(trace, text, replayed.profile)))
    return results


def _failure(trace: Trace, target: str, profile: Profile) -> str:
    """How a vector that failed its replay fails, recorded: the step and its verdict."""
    try:
        recorded = record(trace, target, profile=profile)
    except BuildDiverged as exc:  # a finding before the first action
        return str(exc)
    step = recorded.diverging_step
    if step is None:  # it passed when recorded: the replay in a row differed
        return "failed in a row with the vectors before it, passed alone"
    return f"step {step}: {recorded.steps[step - 1].verdict}"


__all__ = ["GroupResult", "TraceFileError", "check_vectors", "vector_files"]
