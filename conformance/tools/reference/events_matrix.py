"""The target x consumer-model matrix of the events level, read from the committed
findings (``findings/TARGET/pool-events-CONSUMER-*.itf.json``, written by
``python findings/collect.py``): a docs fragment, so the table is what the runs found."""

from __future__ import annotations

from pathlib import Path

from kvpool.spec import CONSUMER_MODELS, built_in_profile

from ...machines.engine.trace_file import SUFFIX
from ...machines.events.upstream import broken_property, report_link, upstream_report
from ...trace.files import read_trace
from .findings_events import publishes_events
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
        if not traces:
            continue
        profile = built_in_profile(traces[0].meta.profile)  # a field is never a path
        emits = publishes_events(traces[0].meta.target)
        cells = []
        for model in CONSUMER_MODELS:
            if not emits:
                cells.append("no events")
                continue
            broken = []
            for trace in traces:
                if trace.meta.consumer != model:
                    continue
                name = code(broken_property(trace.meta.message) or "?")
                number = upstream_report(trace.meta)
                broken.append(f"{name} ({report_link(number)})" if number else name)
            cells.append("fails: " + ", ".join(broken) if broken else "passes")
        promised = profile.consumer_contract or "none"
        rows.append((folder.name, f"{profile.name} ({promised})", *cells))
    headers = ("target", "profile (promises)", *(f"{m} consumer" for m in CONSUMER_MODELS))
    return table(headers, rows)
