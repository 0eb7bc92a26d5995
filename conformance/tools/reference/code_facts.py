"""Facts read off the spec's own code: which rules a check can break, which events a
transition can publish, which profile fields and flat rules it depends on.

The spec keeps no hand-written table of these; they follow from the code. Starting at one
function, we walk every spec function it calls (transitively, through its module's names)
and collect what the walked code mentions: a rule id in a string literal, an event class it
builds, a ``profile.<field>`` it reads, a function of :mod:`kvpool.spec.flat` it calls. A
table kept by hand could drift from the code; this cannot, and ``tests/docs`` checks the
result against the spec's observed behaviour.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from functools import cache
from typing import Any, NamedTuple

from kvpool.spec import flat
from kvpool.spec.events import AllBlocksCleared, BlockRemoved, BlockStored
from kvpool.spec.profile import Profile
from kvpool.spec.rules import RULES

#: The events a pool publishes, by class name.
EVENT_CLASSES: tuple[type, ...] = (BlockStored, BlockRemoved, AllBlocksCleared)

#: Profile fields that name or describe a profile rather than choose a behaviour.
_NOT_A_CHOICE = frozenset(
    {"name", "description", "consumer_contract", "consumer_contract_source", "base", "reasons"}
)


def profile_choices() -> tuple[str, ...]:
    """The profile fields that choose a behaviour, in declaration order."""
    return tuple(f.name for f in fields(Profile) if f.name not in _NOT_A_CHOICE)


class Code(NamedTuple):
    """One piece of spec code: a parsed body and the module names it is read with.

    ``function`` is the function it is the body of (``None`` for a piece such as one
    ``case`` of a ``match``).
    """

    tree: ast.AST
    names: dict[str, Any]
    function: types.FunctionType | None = None


@cache
def _parse(function: types.FunctionType) -> ast.AST:
    return ast.parse(textwrap.dedent(inspect.getsource(function)))


def code_of(function: types.FunctionType) -> Code:
    """The parsed body of ``function``."""
    return Code(_parse(function), function.__globals__, function)


def _is_spec_function(obj: object) -> bool:
    return isinstance(obj, types.FunctionType) and obj.__module__.startswith("kvpool.spec")


def _resolve(node: ast.expr, names: dict[str, Any]) -> object:
    """The object a name or dotted name (``allocation.release``) refers to, or ``None``."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, names)
        if isinstance(owner, types.ModuleType):
            return getattr(owner, node.attr, None)
    return None


def _calls(code: Code) -> Iterator[object]:
    """What every call in ``code`` calls, where a name resolves."""
    for node in ast.walk(code.tree):
        if isinstance(node, ast.Call):
            yield _resolve(node.func, code.names)


def _functions(codes: Iterable[Code]) -> set[types.FunctionType]:
    """The functions whose bodies ``codes`` are."""
    out: set[types.FunctionType] = set()
    for code in codes:
        if isinstance(code.function, types.FunctionType):
            out.add(code.function)
    return out


def reach(*start: Code) -> list[Code]:
    """``start`` and every spec function reachable from it by calls, each once."""
    out = list(start)
    seen = _functions(start)
    pending = list(start)
    while pending:
        for target in _calls(pending.pop()):
            if not _is_spec_function(target) or target in seen:
                continue
            assert isinstance(target, types.FunctionType)
            seen.add(target)
            found = code_of(target)
            out.append(found)
            pending.append(found)
    return out


def rule_ids(codes: Iterable[Code]) -> set[str]:
    """Rule ids (keys of :data:`RULES`) written as string literals in ``codes``."""
    return {
        node.value
        for code in codes
        for node in ast.walk(code.tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in RULES
    }


def constructed(codes: Iterable[Code], wanted: tuple[type, ...]) -> tuple[type, ...]:
    """The classes of ``wanted`` that ``codes`` build an instance of, in ``wanted``'s order."""
    found = {target for code in codes for target in _calls(code) if target in wanted}
    return tuple(c for c in wanted if c in found)


def profile_fields_read(codes: Iterable[Code]) -> tuple[str, ...]:
    """Behaviour-choosing profile fields read as ``profile.<field>`` or
    ``<x>.profile.<field>``, in declaration order."""
    choices = profile_choices()
    found = set()
    for code in codes:
        for node in ast.walk(code.tree):
            if not isinstance(node, ast.Attribute) or node.attr not in choices:
                continue
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "profile") or (
                isinstance(owner, ast.Attribute) and owner.attr == "profile"
            ):
                found.add(node.attr)
    return tuple(f for f in choices if f in found)


def flat_functions(codes: Iterable[Code]) -> tuple[types.FunctionType, ...]:
    """The functions of :mod:`kvpool.spec.flat` among ``codes``, in the file's order."""
    reached = _functions(codes)
    ours = [f for f in reached if f.__module__ == flat.__name__]
    return tuple(sorted(ours, key=lambda f: f.__code__.co_firstlineno))


def match_case(function: types.FunctionType, cls: type) -> Code:
    """The body of the ``case Cls(...)`` arm of the ``match`` in ``function``.

    ``KeyError`` when ``function`` has no arm for ``cls``: the caller relies on one.
    """
    for node in ast.walk(_parse(function)):
        if not isinstance(node, ast.match_case):
            continue
        pattern = node.pattern
        if isinstance(pattern, ast.MatchClass):
            named = _resolve(pattern.cls, function.__globals__)
            if named is cls:
                body = ast.Module(body=node.body, type_ignores=[])
                return Code(body, function.__globals__)
    raise KeyError(f"{function.__qualname__} has no case for {cls.__name__}")


def docstring_conditions(function: Callable[..., object]) -> tuple[str, list[str], list[str]]:
    """A docstring split into its prose, its ``pre:`` lines and its ``post:`` lines."""
    text = inspect.cleandoc(function.__doc__ or "")
    prose: list[str] = []
    pre: list[str] = []
    post: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("pre:"):
            pre.append(stripped.removeprefix("pre:").strip())
        elif stripped.startswith("post:"):
            post.append(stripped.removeprefix("post:").strip())
        else:
            prose.append(line)
    return "\n".join(prose).strip(), pre, post


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comments written above each field of a dataclass, joined into one line
    per field (fields without one are left out)."""
    lines = inspect.getsource(cls).splitlines()
    out: dict[str, str] = {}
    pending: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped.removeprefix("#:").strip())
            continue
        name, colon, _ = stripped.partition(":")
        if pending and colon and name.isidentifier():
            out[name] = " ".join(pending)
        pending = []
    return out
