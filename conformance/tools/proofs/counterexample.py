"""A bounded counterexample written as a trace file that ``kvpool replay`` accepts.

The trace's target is the planted-fault pool of ``tests/conformance/faulty_pools.py``
with the same bug (``faulty_pools:NAME``, importable when that folder is on ``sys.path``
or is the working directory); replayed on it the trace diverges, on ``impl`` it conforms.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...trace.files import write_trace
from ...trace.model import Trace, TraceMeta
from ...trace.record import record
from .actions import FAULTS
from .bmc import BmcResult, pool_config


def target_for(fault: str) -> str | None:
    """The ``--target`` of the faulty pool with the same bug, if one exists."""
    pool = FAULTS[fault].pool if fault in FAULTS else None
    return f"faulty_pools:{pool}" if pool else None


def trace_of(result: BmcResult, target: str | None = None) -> Trace:
    """The counterexample as an unrecorded trace (its actions and metadata)."""
    assert result.fault is not None and result.found
    name = target or target_for(result.fault) or "impl"
    meta = TraceMeta(
        target=name,
        profile="seed",
        machine="pool",
        level=result.level,
        config=pool_config(result.blocks),
        message=f"kvpool prove --bmc: shortest run showing {result.fault} "
        f"({result.depth_reached} step(s), {result.blocks} blocks)",
    )
    return Trace(meta, result.actions)


def write_counterexample(result: BmcResult, path: Path, record_it: bool = True) -> Path:
    """Write the counterexample to ``path``. With ``record_it`` each step is first recorded
    on the trace's target (expected / actual / verdict per step); a target that does not
    load here (``faulty_pools`` off ``sys.path``) leaves the bare actions, which replay
    the same way."""
    trace = trace_of(result)
    if record_it:
        try:
            trace = record(trace)
        except Exception as exc:  # the target does not load here
            note = f"{trace.meta.message}; not recorded here ({type(exc).__name__}: {exc})"
            trace = replace(trace, meta=replace(trace.meta, message=note))
    return write_trace(trace, path)
