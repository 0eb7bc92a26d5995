"""Writing each difference as a trace file (and its pytest file) that ``kvpool show``
renders and ``kvpool replay`` re-runs, pool A against pool B."""

from __future__ import annotations

from pathlib import Path

from ...machines.pool.levels import Level
from ...machines.pool.runner import Failure
from ...trace.files import slug, write_pytest, write_trace
from ...trace.model import Trace, TraceMeta
from ...trace.record import record
from ...trace.save import kvpool_version
from .loading import Pair


def diff_meta(pair: Pair, level: Level, seed: int, difference: Failure) -> TraceMeta:
    """The trace header of one difference: both pools, their profiles and releases."""
    return TraceMeta(
        target=pair.a.spec,
        profile=pair.a.profile.name,
        machine="pool",
        level=level.name,
        config=difference.config,
        seed=seed,
        target_version=pair.a.version,
        kvpool_version=kvpool_version(),
        message=difference.message,
        versus=pair.b.spec,
        versus_profile=pair.b.profile.name,
        versus_version=pair.b.version,
    )


def trace_name(pair: Pair, level: Level, seed: int, number: int) -> str:
    """``vllm_0_23_0-vs-vllm_0_24_0-order-7-1.itf.json``."""
    return f"{slug(pair.a.spec)}-vs-{slug(pair.b.spec)}-{level.name}-{seed}-{number}.itf.json"


def save_difference(
    pair: Pair, level: Level, seed: int, difference: Failure, trace_dir: Path, number: int
) -> tuple[Trace, Path]:
    """Record the difference by replaying it, write its trace and pytest file; the
    recorded trace and the trace file's path. Raises what recording raised."""
    trace = Trace(diff_meta(pair, level, seed, difference), difference.trace)
    recorded = record(trace)
    path = write_trace(recorded, trace_dir / trace_name(pair, level, seed, number))
    write_pytest(path, recorded)
    return recorded, path
