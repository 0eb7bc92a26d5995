"""Values as ITF JSON (the Informal Trace Format of TLA+ and Quint tools), both ways.

Encoding follows the type of each field, so decoding can rebuild the exact values:
integers are JSON numbers (``{"#bigint": "..."}`` beyond 2**53), tuples of one type are
lists, fixed-shape tuples ``{"#tup": [...]}``, frozensets ``{"#set": [...]}``, mappings
``{"#map": [[k, v], ...]}``, dataclasses records, an optional value the Quint variant
``{"tag": "Some" | "None", "value": ...}``, bytes lowercase hex strings, and a float (which
ITF lacks) ``{"#unserializable": "repr"}``. A union of dataclasses carries its member's name
in ``"kind"`` (or its ``operation`` for actions). Nothing else is accepted: a trace is data.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin, get_type_hints

Json = Any

SAFE_INT = 2**53


class ItfError(ValueError):
    """A JSON value does not have the shape its field needs; the message says where."""


def _is_optional(hint: Any) -> tuple[bool, Any]:
    if get_origin(hint) in (Union, types.UnionType):
        args = get_args(hint)
        rest = tuple(a for a in args if a is not type(None))
        if len(rest) < len(args):
            inner = rest[0] if len(rest) == 1 else Union[rest]  # noqa: UP007
            return True, inner
    return False, hint


def _union_members(hint: Any) -> tuple[Any, ...]:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return ()


def _discriminator(cls: type) -> tuple[str, str]:
    """The record field that names a union member, and its value for ``cls``."""
    operation = getattr(cls, "operation", "")
    if isinstance(operation, str) and operation:
        return "operation", operation
    return "kind", cls.__name__


def _omitted_defaults(cls: type) -> dict[str, Any]:
    """Fields of ``cls`` a trace leaves out while they hold their default (marked with
    ``metadata={"itf": "omit-default"}``), with that default (read once per class)."""
    omitted = _OMITTED.get(cls)
    if omitted is None:
        omitted = _OMITTED[cls] = {
            f.name: f.default
            for f in dataclasses.fields(cls)
            if f.metadata.get("itf") == "omit-default" and f.default is not dataclasses.MISSING
        }
    return omitted


_OMITTED: dict[type, dict[str, Any]] = {}


def hints_of(cls: type) -> dict[str, Any]:
    """The resolved field types of dataclass ``cls`` (ClassVars left out); read once per
    class (every action of a trace, every message of the wire protocol asks again)."""
    hints = _HINTS.get(cls)
    if hints is None:
        names = {f.name for f in dataclasses.fields(cls)}
        hints = _HINTS[cls] = {k: v for k, v in get_type_hints(cls).items() if k in names}
    return hints


_HINTS: dict[type, dict[str, Any]] = {}


def encode(value: Any, hint: Any) -> Json:
    """``value`` (of type ``hint``) as an ITF JSON value."""
    # the leaves first: most values are, and a leaf type is never an option or a union
    if hint is int:
        return value if -SAFE_INT < value < SAFE_INT else {"#bigint": str(value)}
    if hint is bool:
        return bool(value)
    if hint is bytes:
        return bytes(value).hex()
    if hint is str:
        return str(value)
    if hint is float:
        return {"#unserializable": repr(float(value))}
    optional, inner = _is_optional(hint)
    if optional:
        if value is None:
            return {"tag": "None", "value": {"#tup": []}}
        return {"tag": "Some", "value": encode(value, inner)}
    members = _union_members(hint)
    if members:
        for member in members:
            if isinstance(member, type) and isinstance(value, member):
                return encode(value, member)
        raise ItfError(f"{value!r} is none of {hint}")
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return [encode(v, args[0]) for v in value]
        return {"#tup": [encode(v, a) for v, a in zip(value, args, strict=True)]}
    if origin is frozenset:
        items = [encode(v, args[0]) for v in value]
        return {"#set": sorted(items, key=_sort_key)}
    if origin in (dict, Mapping):
        pairs = [[encode(k, args[0]), encode(v, args[1])] for k, v in value.items()]
        return {"#map": sorted(pairs, key=_sort_key)}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        field, name = _discriminator(hint)
        record: dict[str, Json] = {field: name}
        omitted = _omitted_defaults(hint)
        for name, field_hint in hints_of(hint).items():
            item = getattr(value, name)
            if name in omitted and item == omitted[name]:
                continue
            record[name] = encode(item, field_hint)
        return record
    raise ItfError(f"cannot encode a value of type {hint}")


def _sort_key(value: Json) -> str:
    return json.dumps(value, sort_keys=True)


def decode(data: Json, hint: Any, where: str = "trace") -> Any:
    """The value of type ``hint`` that ``data`` encodes; :class:`ItfError` names ``where``."""
    # the leaves first: most values are, and a leaf type is never an option or a union
    if hint is bool:
        if not isinstance(data, bool):
            raise ItfError(f"{where}: expected a boolean, got {_kind(data)}")
        return data
    if hint is int:
        if isinstance(data, dict) and set(data) == {"#bigint"}:
            text = data["#bigint"]
            if not isinstance(text, str) or len(text) > 400:
                raise ItfError(f"{where}: a #bigint must be a string of digits")
            try:
                return int(text)
            except ValueError:
                raise ItfError(f"{where}: {text!r} is not an integer") from None
        if isinstance(data, bool) or not isinstance(data, int):
            raise ItfError(f"{where}: expected an integer, got {_kind(data)}")
        return data
    if hint is float:
        text = _field(data, "#unserializable", where)
        try:
            return float(text)
        except (TypeError, ValueError):
            raise ItfError(f"{where}: {text!r} is not a number") from None
    if hint is str:
        if not isinstance(data, str):
            raise ItfError(f"{where}: expected a string, got {_kind(data)}")
        return data
    if hint is bytes:
        if not isinstance(data, str):
            raise ItfError(f"{where}: expected hex bytes, got {_kind(data)}")
        try:
            return bytes.fromhex(data)
        except ValueError:
            raise ItfError(f"{where}: {data[:40]!r} is not hex") from None
    optional, inner = _is_optional(hint)
    if optional:
        tag = _field(data, "tag", where)
        if tag == "None":
            return None
        if tag != "Some":
            raise ItfError(f"{where}: expected the variant Some or None, got tag {tag!r}")
        return decode(_field(data, "value", where), inner, where)
    members = _union_members(hint)
    if members:
        return _decode_member(data, members, where)
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            if not isinstance(data, list):
                raise ItfError(f"{where}: expected a list, got {_kind(data)}")
            if args[0] is int and all(type(v) is int for v in data):
                return tuple(data)  # block ids, counts: decoded as they are, without a walk
            return tuple(decode(v, args[0], f"{where}[{i}]") for i, v in enumerate(data))
        items = _field(data, "#tup", where)
        if not isinstance(items, list) or len(items) != len(args):
            raise ItfError(f"{where}: expected a #tup of {len(args)}")
        return tuple(
            decode(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(items, args, strict=True))
        )
    if origin is frozenset:
        items = _field(data, "#set", where)
        if not isinstance(items, list):
            raise ItfError(f"{where}: a #set holds a list")
        return frozenset(decode(v, args[0], f"{where}{{}}") for v in items)
    if origin in (dict, Mapping):
        pairs = _field(data, "#map", where)
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 for p in pairs
        ):
            raise ItfError(f"{where}: a #map holds [key, value] pairs")
        return {
            decode(k, args[0], f"{where} key"): decode(v, args[1], f"{where}[{k!r}]")
            for k, v in pairs
        }
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(data, dict):
            raise ItfError(f"{where}: expected a record, got {_kind(data)}")
        hints = hints_of(hint)
        field, name = _discriminator(hint)
        known = set(hints) | {field}
        unknown = set(data) - known
        if unknown:
            raise ItfError(f"{where}: unknown field(s) {sorted(unknown)} for {name}")
        values = {}
        omitted = _omitted_defaults(hint)
        for key, field_hint in hints.items():
            if key not in data and key in omitted:
                continue
            if key not in data:
                raise ItfError(f"{where}: {name} needs the field {key!r}")
            values[key] = decode(data[key], field_hint, f"{where}.{key}")
        try:
            return hint(**values)
        except (TypeError, ValueError) as exc:
            raise ItfError(f"{where}: not a valid {name}: {exc}") from None
    raise ItfError(f"{where}: cannot decode a value of type {hint}")


def _decode_member(data: Json, members: tuple[Any, ...], where: str) -> Any:
    if not isinstance(data, dict):
        raise ItfError(f"{where}: expected a record, got {_kind(data)}")
    for member in members:
        field, name = _discriminator(member)
        if data.get(field) == name:
            return decode(data, member, where)
    names = sorted(_discriminator(m)[1] for m in members)
    got = data.get("operation", data.get("kind"))
    raise ItfError(f"{where}: unknown kind {got!r}; expected one of {names}")


def _field(data: Json, key: str, where: str) -> Json:
    if not isinstance(data, dict) or key not in data:
        raise ItfError(f"{where}: expected a record with {key!r}, got {_kind(data)}")
    return data[key]


def _kind(data: Json) -> str:
    if isinstance(data, dict):
        return f"a record with {sorted(data)[:4]}"
    return type(data).__name__
