"""ITF encoders and decoders built once per type: the wire's hot path.

:func:`..trace.itf.encode` and :func:`..trace.itf.decode` read a value's type again for
every value (its origin, its arguments, whether it is optional), which costs more than the
value itself when a program answers thousands of messages a second. :func:`encoder` and
:func:`decoder` read the type once and return a function for its values, writing exactly
what :mod:`..trace.itf` writes. A decoder takes the well-formed values only: anything it
does not expect is handed to :func:`..trace.itf.decode`, whose answer (a value, or the
error naming where the data is wrong) is the answer, so errors read the same either way.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from functools import cache
from typing import Any, Union, get_args, get_origin

from ..trace.itf import SAFE_INT, ItfError, Json, decode, encode, hints_of

Encoder = Callable[[Any], Json]
Decoder = Callable[[Json], Any]


class _Unexpected(Exception):
    """A value the fast decoder does not take: :func:`..trace.itf.decode` judges it."""


def encode_fast(value: Any, hint: Any) -> Json:
    """What :func:`..trace.itf.encode` writes for ``value`` of type ``hint``."""
    return encoder(hint)(value)


def decode_fast(data: Json, hint: Any, where: str) -> Any:
    """What :func:`..trace.itf.decode` reads from ``data`` as ``hint`` (or the error it
    raises, naming ``where``)."""
    try:
        return decoder(hint)(data)
    except _Unexpected:
        return decode(data, hint, where)


def _int(value: Any) -> Json:
    return value if -SAFE_INT < value < SAFE_INT else {"#bigint": str(value)}


def _members(hint: Any) -> tuple[Any, ...]:
    return get_args(hint) if get_origin(hint) in (Union, types.UnionType) else ()


def _discriminator(cls: type) -> tuple[str, str]:
    operation = getattr(cls, "operation", "")
    if isinstance(operation, str) and operation:
        return "operation", operation
    return "kind", cls.__name__


def _omitted(cls: type) -> dict[str, Any]:
    return {
        f.name: f.default
        for f in dataclasses.fields(cls)
        if f.metadata.get("itf") == "omit-default" and f.default is not dataclasses.MISSING
    }


@cache
def encoder(hint: Any) -> Encoder:
    """A function writing values of type ``hint`` as :func:`..trace.itf.encode` does."""
    if hint is int:
        return _int
    if hint is bool:
        return bool
    if hint is bytes:
        return lambda value: bytes(value).hex()
    if hint is str:
        return str
    members = _members(hint)
    if type(None) in members:
        rest = tuple(m for m in members if m is not type(None))
        inner = encoder(rest[0] if len(rest) == 1 else Union[rest])  # noqa: UP007

        def optional(value: Any) -> Json:
            if value is None:
                return {"tag": "None", "value": {"#tup": []}}
            return {"tag": "Some", "value": inner(value)}

        return optional
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if args[0] is int:
            return lambda value: [_int(v) for v in value]
        item = encoder(args[0])
        return lambda value: [item(v) for v in value]
    if origin is tuple and Ellipsis not in args:
        items = [encoder(a) for a in args]
        return lambda value: {"#tup": [w(v) for w, v in zip(items, value, strict=True)]}
    if origin is frozenset and args[0] is bytes:  # hex strings: in the order of their JSON
        return lambda value: {"#set": sorted([bytes(v).hex() for v in value])}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        field, name = _discriminator(hint)
        omitted = _omitted(hint)
        parts = [
            (key, encoder(h), key in omitted, omitted.get(key)) for key, h in hints_of(hint).items()
        ]

        def record(value: Any) -> Json:
            written: dict[str, Json] = {field: name}
            for key, write, omissible, default in parts:
                item = getattr(value, key)
                if omissible and item == default:
                    continue
                written[key] = write(item)
            return written

        return record
    return lambda value: encode(value, hint)  # the rest as the trace module writes it


@cache
def decoder(hint: Any) -> Decoder:
    """A function reading well-formed values of type ``hint`` (anything else raises
    :class:`_Unexpected`: see :func:`decode_fast`)."""
    if hint in (int, bool, str):
        exact = hint

        def leaf(data: Json) -> Any:
            if type(data) is not exact:
                raise _Unexpected
            return data

        return leaf
    if hint is bytes:

        def hexadecimal(data: Json) -> Any:
            if type(data) is not str:
                raise _Unexpected
            try:
                return bytes.fromhex(data)
            except ValueError:
                raise _Unexpected from None

        return hexadecimal
    members = _members(hint)
    if type(None) in members:
        rest = tuple(m for m in members if m is not type(None))
        inner = decoder(rest[0] if len(rest) == 1 else Union[rest])  # noqa: UP007

        def optional(data: Json) -> Any:
            if type(data) is not dict:
                raise _Unexpected
            tag = data.get("tag")
            if tag == "None":
                return None
            if tag != "Some" or "value" not in data:
                raise _Unexpected
            return inner(data["value"])

        return optional
    if members and all(isinstance(m, type) and dataclasses.is_dataclass(m) for m in members):
        by_name = {_discriminator(m): decoder(m) for m in members}

        def member(data: Json) -> Any:
            if type(data) is not dict:
                raise _Unexpected
            for (field, name), read in by_name.items():
                if data.get(field) == name:
                    return read(data)
            raise _Unexpected

        return member
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = decoder(args[0])

        def sequence(data: Json) -> Any:
            if type(data) is not list:
                raise _Unexpected
            return tuple([item(v) for v in data])

        return sequence
    if origin is tuple:
        items = [decoder(a) for a in args]

        def fixed(data: Json) -> Any:
            values = data.get("#tup") if type(data) is dict else None
            if type(values) is not list or len(values) != len(items):
                raise _Unexpected
            return tuple([read(v) for read, v in zip(items, values, strict=True)])

        return fixed
    if origin is frozenset:
        item = decoder(args[0])

        def unordered(data: Json) -> Any:
            values = data.get("#set") if type(data) is dict else None
            if type(values) is not list:
                raise _Unexpected
            return frozenset([item(v) for v in values])

        return unordered
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        field, _ = _discriminator(hint)
        fields = {key: decoder(h) for key, h in hints_of(hint).items()}
        known = {*fields, field}
        omitted = _omitted(hint)

        def record(data: Json) -> Any:
            if type(data) is not dict or not known.issuperset(data):
                raise _Unexpected
            values = {}
            for key, read in fields.items():
                if key in data:
                    values[key] = read(data[key])
                elif key not in omitted:
                    raise _Unexpected
            try:
                return hint(**values)
            except (TypeError, ValueError):
                raise _Unexpected from None

        return record
    return _slow(hint)  # maps, floats, other unions: rare on the wire


def _slow(hint: Any) -> Decoder:
    def slow(data: Json) -> Any:
        try:
            return decode(data, hint, "value")
        except ItfError:  # judged again from the top, where the error names its place
            raise _Unexpected from None

    return slow
