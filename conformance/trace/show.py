"""A trace as a table a person reads: one row per step, the diverging step marked."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from rich.table import Table
from rich.text import Text

from ..report import config_line, short
from .itf import Json
from .model import Trace


def printable(text: str) -> str:
    """``text`` with control characters (terminal escapes, newlines) replaced by ``?``: what
    a trace file says is shown, never interpreted by the terminal."""
    return "".join(c if c.isprintable() else "?" for c in text)


def action_text(action: Any) -> str:
    """An action in one short line: long hash lists are cut to their ends and count; a
    field a trace leaves out at its default is left out here too."""
    parts = []
    for f in fields(action):
        value = getattr(action, f.name)
        if f.metadata.get("itf") == "omit-default" and value == f.default:
            continue
        if isinstance(value, tuple) and len(value) > 3 and all(isinstance(v, bytes) for v in value):
            parts.append(f"{f.name}=[{short(value[0])}, …, {short(value[-1])}] ({len(value)})")
        else:
            parts.append(f"{f.name}={short(value)}")
    return f"{action.operation}({', '.join(parts)})"


def outcome_text(value: Json) -> str:
    """An outcome recorded in a trace, in a few words. Any JSON value renders (a file is
    data: a shape this does not know is shown as compact JSON, never an error)."""
    if not isinstance(value, dict) or "tag" not in value:
        return "" if value is None else _json_text(value)
    tag, inner = value["tag"], value.get("value")
    if tag == "Returned" and isinstance(inner, dict):
        result = _result_text(inner.get("result"))
        fired = [_fired_text(f) for f in _list(inner.get("fired"))]
        return result + (" fired " + ", ".join(fired) if fired else "")
    if tag == "Raised" and isinstance(inner, str) and inner.startswith("Nonconformance: "):
        return "differs (see the verdict)"  # the harness's verdict, not what the target did
    if tag in ("Refused", "Raised"):
        return f"{str(tag).lower()}: {inner if isinstance(inner, str) else _json_text(inner)}"
    if tag == "Scheduled" and isinstance(inner, dict):
        return _scheduled_text(inner)
    if tag == "Bool":
        return _json_text(inner)
    if tag == "Nothing":
        return "nothing"
    if tag == "Lacks":
        return "not called: its pool lacks this call"
    return _json_text(value)


def _scheduled_text(scheduled: dict[str, Json]) -> str:
    """``4 computed, tables [7 8] [9], copies 3->5``: a manager's answer to a request."""
    tables = " ".join(_ids_text(t) for t in _list(scheduled.get("tables")))
    copies = ", ".join(
        "->".join(_json_text(b) for b in _list(c)) for c in _list(scheduled.get("copies"))
    )
    computed = _json_text(scheduled.get("num_computed_tokens"))
    return f"{computed} computed, tables {tables or '-'}" + (f", copies {copies}" if copies else "")


def _list(value: Json) -> list[Json]:
    """The items of an ITF list, tuple (``#tup``) or set (``#set``); ``[]`` for anything else."""
    if isinstance(value, dict) and len(value) == 1:
        value = value.get("#tup", value.get("#set"))
    return value if isinstance(value, list) else []


def _ids_text(value: Json) -> str:
    return "[" + ", ".join(_json_text(b) for b in _list(value)) + "]"


def _fired_text(fired: Json) -> str:
    parts = _list(fired)
    if len(parts) == 2:
        return f"{_json_text(parts[1])}@{_json_text(parts[0])}"
    return _json_text(fired)


def _json_text(value: Json) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)[:200]


def _result_text(result: Any) -> str:
    if not isinstance(result, dict):
        return _json_text(result)
    tag, value = result.get("tag"), result.get("value")
    if tag == "Nothing":
        return "None"
    if tag == "Blocks":
        return f"blocks {_ids_text(value)}"
    if tag == "Key":
        return f"key {str(value)[:8]}"
    if tag == "Usage" and isinstance(value, dict):
        return f"usage {_json_text(value.get('#unserializable'))}"
    if tag == "Events":
        kinds = (e.get("kind") if isinstance(e, dict) else e for e in _list(value))
        return "events " + (", ".join(_json_text(k) for k in kinds) or "none")
    return _json_text(value)


def _pairs(value: Json) -> list[list[Any]]:
    if isinstance(value, dict) and isinstance(value.get("#map"), list):
        return [p for p in value["#map"] if isinstance(p, list) and len(p) == 2]
    return []


def state_cells(state: dict[str, Json]) -> tuple[str, str, str]:
    """The free queue, the held blocks' ref counts and the keyed blocks, as short text."""
    queue = state.get("free_queue")
    refs = " ".join(f"{_json_text(b)}:{_json_text(n)}" for b, n in _pairs(state.get("ref_cnt")))
    keys = " ".join(
        f"{_json_text(b)}:" + ",".join(_json_text(k)[:6] for k in _list(ks))
        for b, ks in _pairs(state.get("keys"))
    )
    return (
        "" if queue is None else _ids_text(queue) if isinstance(queue, list) else "?",
        refs,
        keys,
    )


def tables_cell(state: dict[str, Json]) -> str:
    """Each live request's block tables (the request machine's traces): ``r1: [1, 2] [3]``."""
    return "; ".join(
        f"{_json_text(rid)}: " + " ".join(_ids_text(t) for t in _list(tables))
        for rid, tables in _pairs(state.get("tables"))
    )


def rows(trace: Trace) -> list[list[str]]:
    """One row per recorded step: index, action, free queue, ref counts, keys, (for the
    request machine) the requests' tables, expected, actual, and the verdict (``ok`` or the
    divergence)."""
    out = []
    diverging = trace.diverging_step
    for i, step in enumerate(trace.steps, 1):
        queue, refs, keys = state_cells(step.state)
        mark = "<- diverges" if i == diverging else ""
        cells = [
            str(i),
            action_text(step.action),
            queue,
            refs,
            keys,
            *([tables_cell(step.state)] if trace.meta.machine == "requests" else []),
            outcome_text(step.expected),
            outcome_text(step.actual),
            step.verdict if step.verdict != "ok" else mark or "ok",
        ]
        out.append([printable(c) for c in cells])
    return out


HEADERS = ["#", "action", "free queue", "ref counts", "keys", "expected", "actual", "verdict"]


def headers(trace: Trace) -> list[str]:
    """The column names; a request trace has the requests' tables, a diff trace's outcome
    columns are pool A's and pool B's."""
    if trace.meta.machine == "requests":
        return [*HEADERS[:5], "tables", *HEADERS[5:]]
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
        return [printable(line) for line in lines]
    lines = [
        f"target {meta.target}{version}, profile {meta.profile}, run {meta.machine}/{meta.level}"
        + (f" ({meta.consumer} consumer)" if meta.consumer else "")
        + seed,
        f"built as {config_line(meta.config)}",
    ]
    if meta.message:
        lines.append(f"recorded divergence: {meta.message}")
    return [printable(line) for line in lines]


def table(trace: Trace) -> Table:
    """The steps as a table; the diverging row in red. The verdict column is left out: the
    diverging step's verdict is printed under the table (:func:`divergence`)."""
    result = Table(show_lines=False, expand=True)
    for name in headers(trace)[:-1]:
        result.add_column(name, ratio=4 if name == "action" else 1, overflow="fold")
    for row in rows(trace):
        style = "red" if row[-1] != "ok" else None
        result.add_row(*(Text(c) for c in row[:-1]), style=style)  # text, never markup
    return result


def divergence(trace: Trace) -> str | None:
    """The diverging step's verdict, as a sentence."""
    step = trace.diverging_step
    if step is None:
        return None
    return printable(f"step {step} diverges: {trace.steps[step - 1].verdict}")


def markdown(trace: Trace) -> str:
    """The trace as GitHub markdown, for pasting into an upstream issue."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ") or " "

    lines = [f"**kvpool trace** — {header_lines(trace)[0]}", ""]
    lines += [f"- {line}" for line in header_lines(trace)[1:]]
    lines += ["", "| " + " | ".join(headers(trace)) + " |", "|" + "---|" * len(headers(trace))]
    for row in rows(trace):
        if row[-1] not in ("ok",):
            row = [f"**{c}**" if c else c for c in row]
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"
