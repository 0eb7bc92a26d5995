"""The target x consumer-model matrix of the events level, read from the committed
findings (``findings/TARGET/pool-events-CONSUMER-*.itf.json``, written by
``python findings/collect.py``; for an engine checked at the engine machine only, its
``engine-scheduler-CONSUMER-*.engine.itf.json``): a docs fragment, so the table is what
the runs found."""

from __future__ import annotations

from pathlib import Path

from kvpool.spec import CONSUMER_MODELS, built_in_profile

from ...machines.engine.trace_file import SUFFIX, read_engine_trace
from ...machines.events.upstream import broken_property, report_link, upstream_report
from ...trace.files import read_trace
from .findings_events import engine_only, publishes_events
from .markdown import code, table


def events_matrix(findings: Path) -> str:
    """One row per findings folder: per consumer model, pass or the properties broken (each
    with the upstream report it matches); ``no events`` for a target that publishes none
    (:func:`~.findings_events.publishes_events`, as the findings page decides: a target
    without an events run leaves no events trace, which is not a pass)."""
    rows = []
    for folder in sorted(p for p in findings.iterdir() if p.is_dir()):
        pool_traces = (p for p in sorted(folder.glob("*.itf.json")) if not p.name.endswith(SUFFIX))
        traces = [read_trace(p) for p in pool_traces]  # an engine trace has no pool events
        judged: list[tuple[str | None, str, int | None]] = [
            (t.meta.consumer, t.meta.message, upstream_report(t.meta)) for t in traces
        ]
        if traces:
            target = traces[0].meta.target
            profile = built_in_profile(traces[0].meta.profile)  # a field is never a path
            promises = f"{profile.name} ({profile.consumer_contract or 'none'})"
        else:
            engine = [read_engine_trace(p) for p in sorted(folder.glob(f"*{SUFFIX}"))]
            if not engine or not engine_only(engine[0].target):
                continue
            target = engine[0].target
            promises = "none (engine machine)"
            judged = [(t.consumer, t.message, None) for t in engine]
        emits = publishes_events(target)
        cells = []
        for model in CONSUMER_MODELS:
            if not emits:
                cells.append("no events")
                continue
            broken = []
            for consumer, message, number in judged:
                if consumer != model:
                    continue
                name = code(broken_property(message) or "?")
                broken.append(f"{name} ({report_link(number)})" if number else name)
            cells.append("fails: " + ", ".join(broken) if broken else "passes")
        rows.append((folder.name, promises, *cells))
    headers = ("target", "profile (promises)", *(f"{m} consumer" for m in CONSUMER_MODELS))
    return table(headers, rows)
