"""Each operation's call on a pool with vLLM's ``BlockPool`` API, worked out from the
operation table once per calling convention (:class:`~.detection.PoolApi`) and shared by
every adapter of that convention: the adapter's step then costs a few lookups, as a match
on the action did.

A :class:`Call` takes the adapter (:class:`~.adapter.VllmApiTarget`, which turns ids into
the pool's blocks, builds requests and watchers, and reads events) and the action.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from kvpool.spec import Action, CacheFullBlocks

from ...machines.pool.operations import PoolOperation
from ...machines.pool.pool_call import Argument, GivenAs, ReadAs, is_set, keyword_parameter
from ...machines.pool.refusal import refusal
from .detection import PoolApi

#: Reads what a call needs off the adapter and the action (or the answer).
Part = Callable[[Any, Any], Any]


@dataclass(frozen=True, slots=True)
class Call:
    """An operation's call on pools of one calling convention, and what the adapter does
    around it."""

    operation: PoolOperation
    #: Makes the call for an action on the adapter's pool and reads the answer (a refusal
    #: by return value raised).
    invoke: Callable[[Any, Action], Any]
    #: The events it queues are tagged with their group (all but ``take_events``'s).
    tags_events: bool
    fires_in_any_order: bool
    #: Optional fields the pool takes no parameter for: an action setting one is not taken.
    untaken: tuple[str, ...]
    #: It gives blocks coarse keys, which events may name by 64-bit integers.
    names_coarse_keys: bool


def call_for(operation: PoolOperation, api: PoolApi, refuses_by_return: bool) -> Call:
    """``operation``'s call on pools called as ``api`` says, for a profile that does or
    does not refuse by return value (worked out once for each)."""
    key = (operation.action, api, refuses_by_return)
    found = _CALLS.get(key)
    if found is None or found.operation is not operation:  # a table extended meanwhile
        if len(_CALLS) >= 1024:
            _CALLS.clear()
        found = _CALLS[key] = _call(operation, api, refuses_by_return)
    return found


_CALLS: dict[tuple[type[Action], PoolApi, bool], Call] = {}


def _call(operation: PoolOperation, api: PoolApi, refuses_by_return: bool) -> Call:
    call = operation.call
    return Call(
        operation=operation,
        invoke=_invoke(operation, api, refuses_by_return),
        tags_events=call.read_as != "events",
        fires_in_any_order=operation.fires_in_any_order,
        untaken=tuple(
            k.field
            for k in call.keywords
            if not k.offered_as_operation and keyword_parameter(k, api) is None
        ),
        names_coarse_keys=operation.action is CacheFullBlocks,
    )


def _invoke(
    operation: PoolOperation, api: PoolApi, refuses_by_return: bool
) -> Callable[[Any, Action], Any]:
    call = operation.call
    method, name = call.method, operation.name
    owner: Callable[[Any], Any] = attrgetter("peer" if call.on_peer else "pool")
    arguments = [_argument(a, api) for a in call.arguments]
    keywords = [(k, keyword_parameter(k, api), _given(k.given_as)) for k in call.keywords]
    read = _reader(call.read_as)
    refuses = bool(operation.refused_by_returning) and refuses_by_return

    if not keywords and not refuses:  # most calls: the arguments, the answer read

        def plain(target: Any, action: Action) -> Any:
            given = [get(target, action) for get in arguments]
            return read(target, getattr(owner(target), method)(*given))

        return plain

    def invoke(target: Any, action: Action) -> Any:
        given = [get(target, action) for get in arguments]
        taken: dict[str, object] = {}
        for keyword, parameter, convert in keywords:
            value = getattr(action, keyword.field)
            if parameter is None:
                if is_set(value):
                    raise TypeError(f"this pool's {method} has no {keyword.parameter} argument")
            elif keyword.always or is_set(value):
                taken[parameter] = convert(target, value)
        returned = getattr(owner(target), method)(*given, **taken)
        if refuses:
            refused = refusal(name, returned, target.profile)
            if refused is not None:
                raise refused
        return read(target, returned)

    return invoke


def _argument(argument: Argument, api: PoolApi) -> Part:
    """How the pool takes ``argument``, read off the adapter and an action: its field's
    value in the argument's form (with the peer's blocks of its ``foreign`` field appended,
    and in one list per group where the pool wants that)."""
    field, given = argument.field, _given(argument.given_as)
    if argument.foreign is not None:
        foreign = argument.foreign
        return lambda target, action: (
            given(target, getattr(action, field)) + target.foreign_blocks(getattr(action, foreign))
        )
    if argument.per_group is not None and getattr(api, argument.per_group):
        return lambda target, action: (given(target, getattr(action, field)),)
    if given is _as_it_is:
        get = attrgetter(field)
        return lambda target, action: get(action)
    return lambda target, action: given(target, getattr(action, field))


def _as_it_is(target: Any, value: Any) -> Any:
    return value


#: How a field's value is handed to the pool, by its form.
_GIVEN: dict[str, Part] = {
    "value": _as_it_is,
    "hash": _as_it_is,
    "blocks": lambda target, ids: target.pool_blocks(ids),
    "block": lambda target, block_id: target.pool.blocks[block_id],
    "list": lambda target, value: list(value),
    "set": lambda target, value: set(value),
    "request": lambda target, hashes: target.request(hashes),
    "watcher": lambda target, name: target.watcher(name),
}


def _given(given_as: GivenAs) -> Part:
    return _GIVEN[given_as]


def _block_ids(blocks: Any) -> tuple[int, ...]:
    return tuple(b.block_id for b in blocks)


#: How the pool's answer is read, in the spec's vocabulary.
_READ: dict[str, Part] = {
    "block_ids": lambda target, returned: _block_ids(returned),
    "block_ids_or_none": lambda target, returned: (
        None if returned is None else _block_ids(returned)
    ),
    "key_or_none": lambda target, returned: None if returned is None else bytes(returned),
    "bool": lambda target, returned: bool(returned),
    "int": lambda target, returned: int(returned),
    "float": lambda target, returned: float(returned),
    "events": lambda target, returned: tuple(target.taken_events(returned)),
    "nothing": lambda target, returned: None,
}


def _reader(read_as: ReadAs) -> Part:
    return _READ[read_as]
