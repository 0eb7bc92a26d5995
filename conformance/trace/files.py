"""Trace files: ITF JSON written and read back, validated against the shipped JSON Schema,
with limits so that a hostile file is refused with a clear error, never executed."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
from kvpool.spec.files import UnreadableFile, read_regular_file

from ..bounds import MAX_TRACE_BYTES, BoundsError, load_json
from .itf import ItfError, Json, decode, encode
from .model import FORMAT_VERSION, AnyAction, AnyConfig, Trace, TraceMeta, TraceStep

ITF_DESCRIPTION = "https://apalache-mc.org/docs/adr/015adr-trace.html"
VARS = ["action", "expected", "actual", "verdict", "free_queue", "ref_cnt", "keys", "tables"]


class TraceFileError(Exception):
    """A trace file cannot be used; the message says which file and why."""


def schema() -> dict[str, Any]:
    """The JSON Schema every trace file follows (shipped with the package)."""
    text = resources.files(__package__).joinpath("trace.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _meta_json(meta: TraceMeta) -> Json:
    document = {
        "format_version": FORMAT_VERSION,
        "target": meta.target,
        "target_version": encode(meta.target_version, str | None),
        "profile": meta.profile,
        "machine": meta.machine,
        "level": meta.level,
        "seed": encode(meta.seed, int | None),
        "manager": encode(meta.manager, str | None),
        "kvpool_version": meta.kvpool_version,
        "message": meta.message,
        "config": encode(meta.config, AnyConfig),
    }
    if meta.versus is not None:  # a diff trace; other traces keep their exact bytes
        document["versus"] = meta.versus
        document["versus_profile"] = meta.versus_profile or meta.profile
        document["versus_version"] = encode(meta.versus_version, str | None)
    if meta.consumer is not None:  # an events trace; other traces keep their exact bytes
        document["consumer"] = meta.consumer
    return document


def trace_json(trace: Trace) -> Json:
    """The ITF document of ``trace``: state 0 before any action, then one per step."""
    states = [{"#meta": {"index": 0}, "action": {"operation": "init"}, **trace.initial}]
    steps = trace.steps or tuple(TraceStep(a) for a in trace.actions)
    for i, step in enumerate(steps, 1):
        state: dict[str, Json] = {"#meta": {"index": i}, "action": encode(step.action, AnyAction)}
        if step.expected is not None:
            state["expected"] = step.expected
        if step.actual is not None:
            state["actual"] = step.actual
        state["verdict"] = step.verdict
        state.update(step.state)
        states.append(state)
    return {
        "#meta": {
            "format": "ITF",
            "format-description": ITF_DESCRIPTION,
            "description": f"kvpool {trace.meta.machine} trace: {trace.meta.message or 'conforms'}",
            "kvpool": _meta_json(trace.meta),
        },
        "vars": VARS,
        "states": states,
    }


def dumps(trace: Trace, compact: bool = False) -> str:
    """The file's text: stable key order and layout, so equal traces are equal bytes.
    ``compact`` puts each state on one line (test vectors: small, and diffs by step)."""
    document = trace_json(trace)
    if not compact:
        return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=True) + "\n"

    def one(value: Json) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))

    states = ",\n".join(one(state) for state in document["states"])
    head = {k: v for k, v in document.items() if k != "states"}
    return one(head)[:-1] + ',"states":[\n' + states + "\n]}\n"


def write_trace(trace: Trace, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(trace), encoding="utf-8")
    return path


def read_trace(path: Path) -> Trace:
    """The trace in ``path``; :class:`TraceFileError` for anything that is not a valid trace."""
    try:
        text = read_regular_file(path, MAX_TRACE_BYTES, "trace")
    except UnreadableFile as exc:
        raise TraceFileError(str(exc)) from None
    try:
        data = load_json(text, str(path), MAX_TRACE_BYTES)
    except BoundsError as exc:
        raise TraceFileError(str(exc)) from None
    return parse_trace(data, str(path))


def parse_trace(data: Json, name: str = "trace") -> Trace:
    """A trace from its decoded JSON document."""
    validator = jsonschema.Draft202012Validator(schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        raise TraceFileError(f"{name} is not a kvpool trace: at {where}: {error.message[:300]}")
    try:
        kv = data["#meta"]["kvpool"]
        meta = TraceMeta(
            target=kv["target"],
            profile=kv["profile"],
            machine=kv["machine"],
            level=kv["level"],
            config=decode(kv["config"], AnyConfig, "#meta.kvpool.config"),
            seed=decode(kv.get("seed", {"tag": "None", "value": {"#tup": []}}), int | None),
            manager=decode(kv.get("manager", {"tag": "None", "value": {"#tup": []}}), str | None),
            target_version=decode(
                kv.get("target_version", {"tag": "None", "value": {"#tup": []}}), str | None
            ),
            kvpool_version=kv.get("kvpool_version", ""),
            message=kv.get("message", ""),
            versus=kv.get("versus"),
            versus_profile=kv.get("versus_profile"),
            versus_version=decode(
                kv.get("versus_version", {"tag": "None", "value": {"#tup": []}}), str | None
            ),
            consumer=kv.get("consumer"),
        )
        states = data["states"]
        steps = []
        for i, state in enumerate(states[1:], 1):
            action = decode(state["action"], AnyAction, f"states[{i}].action")
            extra = {
                k: v for k, v in state.items() if k in ("free_queue", "ref_cnt", "keys", "tables")
            }
            steps.append(
                TraceStep(
                    action,
                    state.get("expected"),
                    state.get("actual"),
                    str(state.get("verdict", "ok")),
                    extra,
                )
            )
    except ItfError as exc:
        raise TraceFileError(f"{name}: {exc}") from None
    _check_machine(meta, [s.action for s in steps], name)
    initial = {k: v for k, v in states[0].items() if k not in ("#meta", "action")}
    return Trace(meta, tuple(s.action for s in steps), tuple(steps), initial)


def _check_machine(meta: TraceMeta, actions: list[Any], name: str) -> None:
    from kvpool.spec import Action, PoolConfig

    from ..machines.requests.target import RequestSetup

    pool = meta.machine == "pool"
    if pool != isinstance(meta.config, PoolConfig) or (
        not pool and not isinstance(meta.config, RequestSetup)
    ):
        raise TraceFileError(f"{name}: a {meta.machine} trace with a {type(meta.config).__name__}")
    wrong = [a for a in actions if isinstance(a, Action) != pool]
    if wrong:
        raise TraceFileError(
            f"{name}: action {wrong[0].operation!r} does not belong in a {meta.machine} trace"
        )
    levels = ("safety", "order", "robustness", "events") if pool else ("pool", "manager")
    if meta.level not in levels:
        raise TraceFileError(
            f"{name}: level {meta.level!r} is not one of the {meta.machine} machine's"
        )
    judged = meta.level == "events" or not pool
    if (meta.level == "events" and meta.consumer is None) or (
        meta.consumer is not None and not judged
    ):
        raise TraceFileError(
            f"{name}: an events trace names its consumer model, and only an events trace "
            "(or a requests trace) does"
        )
    if meta.versus is not None and (not pool or meta.level in ("robustness", "events")):
        raise TraceFileError(
            f"{name}: a diff trace runs the pool machine at safety or order, "
            f"not {meta.machine}/{meta.level}"
        )


def slug(text: str) -> str:
    """``text`` as a file-name part."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60] or "trace"


def write_pytest(trace_path: Path, trace: Trace) -> Path:
    """A standalone pytest file next to ``trace_path`` that replays it and fails the same way.

    The file names the trace's pool (and manager, and a diff's pool B) itself, as the
    command that wrote the trace was given them: a trace file alone never chooses what
    runs (:mod:`.trust`), but this file is code the user runs on purpose, written by the
    run the user started. Every text taken
    from the trace is a Python literal (``repr``) or stripped of quotes in the docstring."""
    meta = trace.meta
    name = slug(trace_path.name.removesuffix(".itf.json"))
    path = trace_path.with_name(f"test_{name}.py")
    path.write_text(
        f'''"""kvpool counterexample, replayed: fails while {_doc(meta.target)} still diverges.

{_doc(meta.message)}

Inspect it with: kvpool show {_doc(trace_path.name)}
"""

from pathlib import Path

from kvpool.conformance.trace.replay import replay_file

TRACE = Path(__file__).with_name({trace_path.name!r})


def test_{name}_conforms() -> None:
    verdict = replay_file(
        TRACE, target={meta.target!r}, manager={meta.manager!r}, versus={meta.versus!r}
    )
    assert verdict.conforms, verdict.describe()
''',
        encoding="utf-8",
    )
    return path


def _doc(text: str) -> str:
    """``text`` safe inside a triple-quoted docstring: no quotes, backslashes or controls."""
    return "".join(
        "'" if c == '"' else "/" if c == "\\" else c if c.isprintable() or c == "\n" else "?"
        for c in text
    )
