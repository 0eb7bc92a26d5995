"""The wire protocol's values: actions, outcomes and pool views as JSON, both ways.

Every value is written as traces and vectors write it (:mod:`..trace.itf`): an action is
its ITF record (``operation`` and the dataclass's fields), an outcome the tagged variant of
:mod:`..trace.outcomes` (``Returned`` with the result and the watchers fired, or
``Refused`` with the pool's reason). A view is a record of the :class:`PoolView` fields the
program shows, each an ITF value of that field's type; a field it leaves out is not shown.

Nothing here knows one operation from another: actions are encoded and decoded by their
dataclass fields, results by their tag, views by :class:`PoolView`'s fields, so a new
action type (or an operation table listing them) needs no change here.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterable
from functools import cache
from typing import Any, Union, get_args, get_origin

from kvpool.spec import Action, Event, Observation

from ..machines.pool import operations
from ..machines.pool.target import PoolView
from ..trace.itf import ItfError, Json, encode, hints_of
from ..trace.outcomes import result_json, variant
from .compiled import decode_fast, encode_fast

#: The result tags of :func:`..trace.outcomes.result_json`, each with the type it decodes
#: to (``Nothing`` is ``None``).
RESULT_TYPES: dict[str, Any] = {
    "Bool": bool,
    "Int": int,
    "Usage": float,
    "Key": bytes,
    "Blocks": tuple[int, ...],
    "Events": tuple[Event, ...],
}
NOTHING = "Nothing"
#: The watchers an action fired: (block, watcher) pairs.
FIRED = tuple[tuple[int, str], ...]
#: An outcome's tags: the pool returned, or it refused the action (with its reason).
RETURNED = "Returned"
REFUSED = "Refused"


class Refusal(Exception):
    """The pool refused an action; the message is the reason it gave."""


def encode_action(action: Action) -> Json:
    """``action`` as its trace record: ``{"operation": ..., field: value, ...}``."""
    return encode_fast(action, type(action))


def pool_actions() -> tuple[type[Action], ...]:
    """The pool actions the protocol carries: those of the operation table
    (:data:`~..engine.operations.POOL_OPERATIONS`), read at each call, so that an
    operation declared there is carried with nothing else changed."""
    return tuple(op.action for op in operations.POOL_OPERATIONS)


def decode_action(
    data: Json, actions: Iterable[type[Action]] | None = None, where: str = "action"
) -> Action:
    """The action ``data`` records, one of ``actions`` (default: :func:`pool_actions`)
    chosen by its ``operation``; :class:`ItfError` names ``where`` when it is none of them
    or malformed."""
    if actions is None:
        table, by_operation = _TABLE_ACTIONS
        if table is not operations.POOL_OPERATIONS:
            by_operation = {a.operation: a for a in pool_actions()}
            _TABLE_ACTIONS[:] = [operations.POOL_OPERATIONS, by_operation]
    else:
        by_operation = {a.operation: a for a in actions}
    operation = data.get("operation") if isinstance(data, dict) else None
    kind = by_operation.get(operation) if isinstance(operation, str) else None
    if kind is None:
        raise ItfError(
            f"{where}: unknown operation {operation!r}; expected one of {sorted(by_operation)}"
        )
    decoded: Action = decode_fast(data, kind, where)
    return decoded


#: The operation table read last, and its actions by operation (a table replaced is read
#: again).
_TABLE_ACTIONS: list[Any] = [None, {}]


def encode_outcome(action: Action, outcome: Observation | Exception) -> Json:
    """What the pool made of ``action``: ``Returned`` (result and watchers fired) or
    ``Refused`` (an exception: the pool's reason)."""
    if isinstance(outcome, Exception):
        return variant(REFUSED, f"{type(outcome).__name__}: {outcome}")
    fired = [encode(f, tuple[int, str]) for f in outcome.fired]
    return variant(RETURNED, {"result": result_json(action, outcome.result), "fired": fired})


def decode_outcome(data: Json, where: str = "outcome") -> Observation | Refusal:
    """The observation an outcome records, or the :class:`Refusal` it states."""
    tag = _record(data, ("tag", "value"), where)["tag"]
    if tag == REFUSED:
        reason = data["value"]
        if not isinstance(reason, str):
            raise ItfError(f"{where}.value: a refusal's reason is a string")
        return Refusal(reason)
    if tag != RETURNED:
        raise ItfError(f"{where}: expected the tag {RETURNED} or {REFUSED}, got {tag!r}")
    value = _record(data["value"], ("result", "fired"), f"{where}.value")
    fired = decode_fast(value["fired"], FIRED, f"{where}.value.fired")
    return Observation(decode_result(value["result"], f"{where}.value.result"), fired)


def encode_returned(result: Any, returns: Any) -> Json:
    """What a manager's method returned (of type ``returns``; ``None`` for a method that
    returns nothing), or the exception it refused with, as a ``returned`` outcome."""
    if isinstance(result, Exception):
        return variant(REFUSED, f"{type(result).__name__}: {result}")
    if returns is type(None):
        return variant(RETURNED)
    return variant(RETURNED, encode_fast(result, returns))


def decode_returned(data: Json, returns: Any, where: str = "outcome") -> Any:
    """The result a ``returned`` outcome holds (of type ``returns``), or its :class:`Refusal`."""
    tag = _record(data, ("tag", "value"), where)["tag"]
    if tag == REFUSED:
        if not isinstance(data["value"], str):
            raise ItfError(f"{where}.value: a refusal's reason is a string")
        return Refusal(data["value"])
    if tag != RETURNED:
        raise ItfError(f"{where}: expected the tag {RETURNED} or {REFUSED}, got {tag!r}")
    if returns is type(None):
        if data["value"] != {"#tup": []}:
            raise ItfError(f'{where}.value: the method returns nothing: {{"#tup": []}}')
        return None
    return decode_fast(data["value"], returns, f"{where}.value")


def decode_result(data: Json, where: str) -> Any:
    """A tagged result (:func:`..trace.outcomes.result_json`) as the value it tags."""
    tag = _record(data, ("tag", "value"), where)["tag"]
    if tag == NOTHING:
        return None
    hint = RESULT_TYPES.get(tag) if isinstance(tag, str) else None
    if hint is None:
        raise ItfError(
            f"{where}: unknown result tag {tag!r}; expected {NOTHING} or one of "
            f"{sorted(RESULT_TYPES)}"
        )
    return decode_fast(data["value"], hint, f"{where}.value")


@cache
def view_fields() -> dict[str, Any]:
    """:class:`PoolView`'s fields, each with the type of its value when shown."""
    return {name: shown_type(hint) for name, hint in hints_of(PoolView).items()}


def shown_type(hint: Any) -> Any:
    """``hint`` without its ``None`` (a view leaves out what it does not show)."""
    if get_origin(hint) in (Union, types.UnionType):
        rest = tuple(a for a in get_args(hint) if a is not type(None))
        return rest[0] if len(rest) == 1 else Union[rest]  # noqa: UP007
    return hint


def encode_view(view: PoolView) -> Json:
    """The shown fields of ``view`` (those not ``None``), each as its ITF value."""
    return ViewWriter().write(view)


class ViewWriter:
    """Writes a pool's views one after another: a field equal to the one in the view
    before is not encoded again (the other side of :class:`ViewReader`). With ``changes``
    (protocol 2) a later view leaves such a field out altogether; :meth:`restart` makes the
    next view whole (a new pool's)."""

    def __init__(self, changes: bool = False) -> None:
        self.last: dict[str, tuple[Any, Json]] = {}
        self.changes = changes
        self.whole = True

    def restart(self, changes: bool) -> None:
        """The next view is a new pool's, written whole; later ones only their changes
        when ``changes``."""
        self.changes, self.whole = changes, True

    def write(self, view: PoolView) -> Json:
        record: dict[str, Json] = {}
        leave_out = self.changes and not self.whole
        self.whole = False
        for name, hint in view_fields().items():
            value = getattr(view, name)
            if value is None:
                continue
            kept = self.last.get(name)
            if kept is not None and kept[0] == value:
                if not leave_out or name == "free_count":
                    record[name] = kept[1]
                continue
            record[name] = encode_view(value) if hint is PoolView else encode_fast(value, hint)
            self.last[name] = (value, record[name])
        return record


def decode_view(data: Json, where: str = "view") -> PoolView:
    """The view a record shows; ``free_count`` is required, every other field optional."""
    return ViewReader().read(data, where)


class ViewReader:
    """Reads a program's views one after another: a field whose JSON is the same as in the
    view before is not decoded again (a step changes a few fields of the view; the keys
    and the index of a pool nobody caches into do not change at all).

    Under protocol 2 (:meth:`start` with ``changes``) a pool shows the fields of its first
    view, and a later view may leave out a field that has not changed since the view
    before: it keeps that value."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[Json, Any]] = {}
        #: The fields the current pool shows, when later views hold only their changes.
        self.shown: frozenset[str] | None = None

    def start(self, data: Json, changes: bool, where: str = "view") -> PoolView:
        """A new pool's first view (whole); later ones hold only changes when ``changes``."""
        self.shown = None
        view = self.read(data, where)
        if changes:
            self.shown = frozenset(data)
        return view

    def read(self, data: Json, where: str = "view") -> PoolView:
        fields = view_fields()
        if not isinstance(data, dict):
            raise ItfError(f"{where}: expected a record, got {type(data).__name__}")
        if not data.keys() <= fields.keys():
            unknown = sorted(data.keys() - fields.keys())
            raise ItfError(f"{where}: unknown field(s) {unknown}; a view has {sorted(fields)}")
        if "free_count" not in data:
            raise ItfError(f"{where}: a view needs the field 'free_count'")
        shown = self.shown
        if shown is not None and not data.keys() <= shown:
            raise ItfError(
                f"{where}: field(s) {sorted(data.keys() - shown)} not in the pool's first view "
                f"(it shows {sorted(shown)})"
            )
        values: dict[str, Any] = {}
        last = self.last
        for name, value in data.items():
            kept = last.get(name)
            if kept is not None and kept[0] == value:
                values[name] = kept[1]
                continue
            if fields[name] is PoolView:
                values[name] = decode_view(value, f"{where}.{name}")
            else:
                values[name] = decode_fast(value, fields[name], f"{where}.{name}")
            last[name] = (value, values[name])
        if shown is not None:
            for name in shown:
                if name not in values:
                    values[name] = last[name][1]
        return PoolView(**values)


def _record(data: Json, keys: tuple[str, ...], where: str) -> dict[str, Json]:
    if not isinstance(data, dict) or set(data) != set(keys):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise ItfError(f"{where}: expected a record with exactly {list(keys)}, got {got}")
    return data


def optional_arguments(kind: type[Action]) -> tuple[str, ...]:
    """The fields of action type ``kind`` whose default is ``None`` or ``False``: optional
    arguments of the pool's call (read once per type: drawing asks for every action)."""
    names = _OPTIONAL_ARGUMENTS.get(kind)
    if names is None:
        names = _OPTIONAL_ARGUMENTS[kind] = tuple(
            f.name for f in dataclasses.fields(kind) if f.default is None or f.default is False
        )
    return names


_OPTIONAL_ARGUMENTS: dict[type[Action], tuple[str, ...]] = {}


def optional_arguments_set(action: Action) -> list[str]:
    """Those of :func:`optional_arguments` that ``action`` sets to another value."""
    return [
        name
        for name in optional_arguments(type(action))
        if getattr(action, name) not in (None, False)
    ]
