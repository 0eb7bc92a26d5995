"""A trace as a table a person reads: one row per step, the diverging step marked."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from rich.table import Table

from ..report import config_line, short
from .itf import Json
from .model import Trace


def action_text(action: Any) -> str:
    """An action in one short line: long hash lists are cut to their ends and count."""
    parts = []
    for f in fields(action):
        value = getattr(action, f.name)
        if isinstance(value, tuple) and len(value) > 3 and all(isinstance(v, bytes) for v in value):
            parts.append(f"{f.name}=[{short(value[0])}, …, {short(value[-1])}] ({len(value)})")
        else:
            parts.append(f"{f.name}={short(value)}")
    return f"{action.operation}({', '.join(parts)})"


def outcome_text(value: Json) -> str:
    """An outcome recorded in a trace, in a few words."""
    if not isinstance(value, dict) or "tag" not in value:
        return "" if value is None else str(value)
    tag, inner = value["tag"], value.get("value")
    if tag == "Returned":
        result = _result_text(inner.get("result")) if isinstance(inner, dict) else "?"
        fired = inner.get("fired", []) if isinstance(inner, dict) else []
        if fired:
            result += " fired " + ", ".join(f"{f['#tup'][1]}@{f['#tup'][0]}" for f in fired)
        return result
    if tag in ("Refused", "Raised"):
        return f"{tag.lower()}: {inner}"
    if tag == "Scheduled" and isinstance(inner, dict):
        tables = " | ".join(
            str(t) for t in inner.get("tables", {}).get("#tup", inner.get("tables", []))
        )
        copies = inner.get("copies", [])
        extra = f" copies {copies}" if copies else ""
        return f"{inner.get('num_computed_tokens')} computed, {tables}{extra}"
    if tag == "Bool":
        return str(inner)
    return str(tag).lower()


def _result_text(result: Any) -> str:
    if not isinstance(result, dict):
        return str(result)
    tag, value = result.get("tag"), result.get("value")
    if tag == "Nothing":
        return "None"
    if tag == "Blocks":
        return f"blocks {value}"
    if tag == "Key":
        return f"key {str(value)[:8]}"
    if tag == "Usage" and isinstance(value, dict):
        return f"usage {value.get('#unserializable')}"
    if tag == "Events" and isinstance(value, list):
        return "events " + ", ".join(str(e.get("kind")) for e in value if isinstance(e, dict))
    return str(value)


def _pairs(value: Json) -> list[list[Any]]:
    if isinstance(value, dict) and isinstance(value.get("#map"), list):
        return [p for p in value["#map"] if isinstance(p, list) and len(p) == 2]
    return []


def state_cells(state: dict[str, Json]) -> tuple[str, str, str]:
    """The free queue, the held blocks' ref counts and the keyed blocks, as short text."""
    queue = state.get("free_queue")
    refs = " ".join(f"{b}:{n}" for b, n in _pairs(state.get("ref_cnt")))
    keys = " ".join(
        f"{b}:" + ",".join(str(k)[:6] for k in (ks.get("#set", []) if isinstance(ks, dict) else []))
        for b, ks in _pairs(state.get("keys"))
    )
    return (str(queue) if queue is not None else "", refs, keys)


def rows(trace: Trace) -> list[list[str]]:
    """One row per recorded step: index, action, free queue, ref counts, keys, expected,
    actual, and the verdict (``ok`` or the divergence)."""
    out = []
    diverging = trace.diverging_step
    for i, step in enumerate(trace.steps, 1):
        queue, refs, keys = state_cells(step.state)
        mark = "<- diverges" if i == diverging else ""
        out.append(
            [
                str(i),
                action_text(step.action),
                queue,
                refs,
                keys,
                outcome_text(step.expected),
                outcome_text(step.actual),
                step.verdict if step.verdict != "ok" else mark or "ok",
            ]
        )
    return out


HEADERS = ["#", "action", "free queue", "ref counts", "keys", "expected", "actual", "verdict"]


def headers(trace: Trace) -> list[str]:
    """The column names; a diff trace's outcome columns are pool A's and pool B's."""
    if trace.meta.versus is None:
        return HEADERS
    return [{"expected": "A", "actual": "B"}.get(h, h) for h in HEADERS]


def header_lines(trace: Trace) -> list[str]:
    meta = trace.meta
    version = f" {meta.target_version}" if meta.target_version else ""
    seed = f", seed {meta.seed}" if meta.seed is not None else ""
    if meta.versus is not None:
        version = version if version.strip() not in meta.target else ""
        other = f" {meta.versus_version}" if meta.versus_version else ""
        other = other if other.strip() not in meta.versus else ""
        lines = [
            f"diff: A {meta.target}{version} (profile {meta.profile}) against "
            f"B {meta.versus}{other} (profile {meta.versus_profile}), level {meta.level}{seed}",
            f"built as {config_line(meta.config)}",
            "columns A and B: each pool's outcome; free queue, ref counts, keys: pool A's",
        ]
        if meta.message:
            lines.append(f"recorded difference: {meta.message}")
        return lines
    lines = [
        f"target {meta.target}{version}, profile {meta.profile}, run {meta.machine}/{meta.level}"
        + seed,
        f"built as {config_line(meta.config)}",
    ]
    if meta.message:
        lines.append(f"recorded divergence: {meta.message}")
    return lines


def table(trace: Trace) -> Table:
    """The steps as a table; the diverging row in red. The verdict column is left out: the
    diverging step's verdict is printed under the table (:func:`divergence`)."""
    result = Table(show_lines=False, expand=True)
    for name in headers(trace)[:-1]:
        result.add_column(name, ratio=4 if name == "action" else 1)
    for row in rows(trace):
        style = "red" if row[-1] != "ok" else None
        result.add_row(*row[:-1], style=style)
    return result


def divergence(trace: Trace) -> str | None:
    """The diverging step's verdict, as a sentence."""
    step = trace.diverging_step
    if step is None:
        return None
    return f"step {step} diverges: {trace.steps[step - 1].verdict}"


def markdown(trace: Trace) -> str:
    """The trace as GitHub markdown, for pasting into an upstream issue."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ") or " "

    lines = [f"**kvpool trace** — {header_lines(trace)[0]}", ""]
    lines += [f"- {line}" for line in header_lines(trace)[1:]]
    lines += ["", "| " + " | ".join(headers(trace)) + " |", "|" + "---|" * len(HEADERS)]
    for row in rows(trace):
        if row[-1] not in ("ok",):
            row = [f"**{c}**" if c else c for c in row]
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"
