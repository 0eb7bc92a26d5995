"""The wire protocol's messages as a JSON Schema, generated from the actions themselves.

Each value's schema follows the ITF encoding (:mod:`..trace.itf`) of its type, so the
schema says exactly what :mod:`.codec` writes and accepts: an action's record from its
dataclass fields, a result from the tags of :data:`.codec.RESULT_TYPES`, a view from
:class:`PoolView`'s fields. The checked-in ``schema.json`` is this module's output (a test
regenerates it)::

    python -m kvpool.conformance.wire.schema > conformance/wire/schema.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any, Union, get_args, get_origin

from kvpool.spec import Action, PoolConfig

from ..machines.pool.target import FINE_EVENT_HASHES, OBSERVABLES, PoolView
from ..machines.requests.target import RequestSetup
from ..trace.itf import hints_of
from .codec import NOTHING, REFUSED, RESULT_TYPES, RETURNED, pool_actions, view_fields
from .manager import MANAGER_METHODS, MANAGER_OFFERS, signature
from .session import ERROR, PROTOCOL, PROTOCOLS, REPLIES, pool_offers

Schema = dict[str, Any]
SCHEMA_ID = "https://kvpool-spec.dev/schemas/wire-protocol.json"


def value_schema(hint: Any, defs: dict[str, Schema]) -> Schema:
    """The schema of an ITF value of type ``hint`` (records go to ``defs``, by name)."""
    if get_origin(hint) in (Union, types.UnionType):
        members = get_args(hint)
        rest = [m for m in members if m is not type(None)]
        if len(rest) < len(members):
            inner = rest[0] if len(rest) == 1 else Union[tuple(rest)]  # noqa: UP007
            return {"oneOf": [variant("Some", value_schema(inner, defs)), variant("None", NONE)]}
        return {"oneOf": [value_schema(m, defs) for m in members]}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {
            "oneOf": [
                {"type": "integer", "minimum": -(2**53) + 1, "maximum": 2**53 - 1},
                record({"#bigint": {"type": "string", "pattern": "^-?[0-9]+$"}}),
            ]
        }
    if hint is float:
        return record({"#unserializable": {"type": "string"}})
    if hint is str:
        return {"type": "string"}
    if hint is bytes:
        return {"type": "string", "pattern": "^([0-9a-f]{2})*$"}
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": value_schema(args[0], defs)}
    if origin is tuple:
        items = [value_schema(a, defs) for a in args]
        shape = {"type": "array", "prefixItems": items, "minItems": len(items)}
        return record({"#tup": {**shape, "maxItems": len(items)}})
    if origin is frozenset:
        return record({"#set": {"type": "array", "items": value_schema(args[0], defs)}})
    if origin in (dict, Mapping):
        pair = [value_schema(args[0], defs), value_schema(args[1], defs)]
        entry = {"type": "array", "prefixItems": pair, "minItems": 2, "maxItems": 2}
        return record({"#map": {"type": "array", "items": entry}})
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return {"$ref": f"#/$defs/{dataclass_schema(hint, defs)}"}
    raise TypeError(f"no schema for a value of type {hint}")


def dataclass_schema(cls: type, defs: dict[str, Schema]) -> str:
    """Put the record of dataclass ``cls`` in ``defs``; its name there."""
    if cls.__name__ in defs:
        return cls.__name__
    defs[cls.__name__] = {}  # taken before its fields: a record may hold its own kind
    operation = getattr(cls, "operation", "")
    field, name = ("operation", operation) if operation else ("kind", cls.__name__)
    properties: Schema = {field: {"const": name}}
    required = [field]
    for f in dataclasses.fields(cls):
        properties[f.name] = value_schema(hints_of(cls)[f.name], defs)
        if f.metadata.get("itf") != "omit-default" or f.default is dataclasses.MISSING:
            required.append(f.name)
    defs[cls.__name__] = {
        "description": (cls.__doc__ or "").strip().splitlines()[0],
        **record(properties, required),
    }
    return cls.__name__


def record(properties: Schema, required: Iterable[str] | None = None) -> Schema:
    names = list(properties) if required is None else list(required)
    return {
        "type": "object",
        "properties": properties,
        "required": names,
        "additionalProperties": False,
    }


NONE: Schema = record({"#tup": {"type": "array", "maxItems": 0}})


def variant(tag: str, value: Schema) -> Schema:
    return record({"tag": {"const": tag}, "value": value})


def message(kind: str, fields: Schema, optional: Iterable[str] = (), reply: bool = False) -> Schema:
    """A message record: ``type``, ``id`` (``in_reply_to`` for a reply) and ``fields``."""
    head = "in_reply_to" if reply else "id"
    properties = {"type": {"const": kind}, head: {"type": "integer"}, **fields}
    return record(properties, [n for n in properties if n not in set(optional)])


def protocol_schema(actions: Iterable[type[Action]] | None = None) -> Schema:
    """Every message of the protocol, with ``actions`` (default: the operation table's,
    :func:`~.codec.pool_actions`) as the actions an ``apply`` carries."""
    defs: dict[str, Schema] = {}
    action_refs = [value_schema(a, defs) for a in (pool_actions() if actions is None else actions)]
    results = [variant(NOTHING, NONE)] + [
        variant(tag, value_schema(hint, defs)) for tag, hint in RESULT_TYPES.items()
    ]
    firing = value_schema(tuple[int, str], defs)
    outcome = {
        "oneOf": [
            variant(
                RETURNED,
                record({"result": {"oneOf": results}, "fired": {"type": "array", "items": firing}}),
            ),
            variant(REFUSED, {"type": "string"}),
        ]
    }
    view_properties = {
        name: ({"$ref": "#/$defs/View"} if hint is PoolView else value_schema(hint, defs))
        for name, hint in view_fields().items()
    }
    defs["View"] = {
        "description": "What the pool shows of its state: free_count, and each other field it "
        "observes (protocol 1: a field left out is not shown; protocol 2: the fields of the "
        "init_ok view are shown, and a later view may leave out one that did not change).",
        **record(view_properties, ["free_count"]),
    }
    defs["Action"] = {"oneOf": action_refs}
    defs["Step"] = {
        "description": "One action's step in an applied_batch (protocol 2): its outcome and "
        "the view after it.",
        **record(
            {
                "outcome": {"$ref": "#/$defs/Outcome"},
                "view": {"$ref": "#/$defs/View"},
                "structure_problems": {"type": "array", "items": {"type": "string"}},
            },
            ["outcome", "view"],
        ),
    }
    defs["Outcome"] = outcome
    calls, returns = [], [NONE]
    for method in sorted(MANAGER_METHODS):
        hints = signature(method)
        arguments = {n: value_schema(h, defs) for n, h in hints.items() if n != "return"}
        # extra and report_mode: only where taken
        required = [n for n in arguments if n not in ("extra", "report_mode")]
        # the message's other fields are the call message's own (it takes this with allOf)
        properties = {"method": {"const": method}, "arguments": record(arguments, required)}
        calls.append({"type": "object", "properties": properties, "required": list(properties)})
        if hints["return"] is not type(None):
            returns.append(value_schema(hints["return"], defs))
    distinct = list({json.dumps(r, sort_keys=True): r for r in returns}.values())
    defs["Call"] = {"oneOf": calls}
    defs["Returned"] = {
        "oneOf": [variant(RETURNED, {"anyOf": distinct}), variant(REFUSED, {"type": "string"})]
    }
    names = {"type": "array", "items": {"enum": sorted(pool_offers() | MANAGER_OFFERS)}}
    shown = {"type": "array", "items": {"enum": [*OBSERVABLES, FINE_EVENT_HASHES]}}
    messages = {
        "init": message(
            "init",
            {
                "protocol": {"enum": list(PROTOCOLS)},
                "config": {
                    "oneOf": [value_schema(PoolConfig, defs), value_schema(RequestSetup, defs)]
                },
                "profile": {"type": ["string", "null"]},
            },
        ),
        REPLIES["init"]: message(
            REPLIES["init"],
            {
                "protocol": {"enum": list(PROTOCOLS)},
                "name": {"type": "string", "minLength": 1},
                "profile": {"type": "string", "minLength": 1},
                "operations": names,
                "observes": shown,
                "view": {"$ref": "#/$defs/View"},
            },
            reply=True,
        ),
        "apply": message("apply", {"action": {"$ref": "#/$defs/Action"}}),
        REPLIES["apply"]: message(
            REPLIES["apply"],
            {
                "outcome": {"$ref": "#/$defs/Outcome"},
                "view": {"$ref": "#/$defs/View"},
                "structure_problems": {"type": "array", "items": {"type": "string"}},
            },
            optional=["structure_problems"],
            reply=True,
        ),
        "batch": message(
            "batch", {"actions": {"type": "array", "items": {"$ref": "#/$defs/Action"}}}
        ),
        REPLIES["batch"]: message(
            REPLIES["batch"],
            {"steps": {"type": "array", "items": {"$ref": "#/$defs/Step"}}},
            reply=True,
        ),
        "call": {
            "allOf": [
                message(
                    "call",
                    {"method": {"enum": sorted(MANAGER_METHODS)}, "arguments": {"type": "object"}},
                ),
                {"$ref": "#/$defs/Call"},
            ]
        },
        REPLIES["call"]: message(
            REPLIES["call"],
            {
                "outcome": {"$ref": "#/$defs/Returned"},
                "view": {"$ref": "#/$defs/View"},
                "structure_problems": {"type": "array", "items": {"type": "string"}},
            },
            optional=["structure_problems"],
            reply=True,
        ),
        ERROR: message(ERROR, {"text": {"type": "string"}}, reply=True),
    }
    defs.update({f"message:{kind}": schema for kind, schema in messages.items()})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"kvpool wire protocol, version {PROTOCOL}: one message per line",
        "oneOf": [{"$ref": f"#/$defs/message:{kind}"} for kind in messages],
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    """The schema file's text."""
    return json.dumps(protocol_schema(), indent=1, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
