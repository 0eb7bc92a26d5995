"""The request fields a release's pool reads on the calls the suite makes, found by
following those calls through the release's source.

The adapter hands the pool's caching calls a request object carrying exactly the fields
the pool reads (:func:`~..vllm_api.requests.request_type`). Which fields those are is read
off the release's own code: starting at each pool method the adapter calls, every read of
``PARAM.field`` on the parameter the request arrives in is collected, and every call that
passes the request on (``self._method(request, ...)``, ``hash_helper(request, ...)``, a
function of the loaded files) is followed into the callee's parameter. Functions the suite
never reaches (a frontend's hashing of an ``EngineCoreRequest``, the scheduler's request
block hasher) are never read, whatever fields they name.

``getattr(request, "field", default)`` is an optional read: the adapter fills it when it
knows the field, and the pool's default serves otherwise.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: The pool methods whose first request-like parameter the adapter fills (the other
#: methods it calls take no request).
REQUEST_METHODS = ("cache_full_blocks", "cache_partial_block")
#: The name of the class whose methods are the entry points.
POOL_CLASS = "BlockPool"


@dataclass
class RequestReads:
    """Each field read off the request, with the first function found reading it."""

    required: dict[str, str] = field(default_factory=dict)
    #: Fields read through ``getattr(request, name, default)``.
    optional: dict[str, str] = field(default_factory=dict)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(self.required)


@dataclass(frozen=True)
class _Function:
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    #: The class it is a method of (its ``self.x`` calls resolve there), if any.
    owner: str | None


class _Source:
    """The functions of the loaded files, by name (module-level) and by (class, name)."""

    def __init__(self, files: Iterable[tuple[str, Path]]) -> None:
        self.functions: dict[str, list[_Function]] = {}
        self.methods: dict[tuple[str, str], _Function] = {}
        for module, path in files:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            short = module.rsplit(".", 1)[-1]
            for node in tree.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    found = _Function(f"{short}.{node.name}", node, None)
                    self.functions.setdefault(node.name, []).append(found)
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                            qualname = f"{short}.{node.name}.{item.name}"
                            self.methods[(node.name, item.name)] = _Function(
                                qualname, item, node.name
                            )


def request_reads(files: Mapping[str, Path]) -> RequestReads:
    """The request fields read on the calls the adapter makes into the pool of ``files``
    (module name -> source file; the pool's module and what it calls)."""
    source = _Source(files.items())
    reads = RequestReads()
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[_Function, str]] = []
    for method in REQUEST_METHODS:
        entry = source.methods.get((POOL_CLASS, method))
        if entry is not None:
            params = _parameters(entry.node)
            if len(params) > 1:
                todo.append((entry, params[1]))  # the first after self
    while todo:
        function, param = todo.pop()
        if (function.qualname, param) in seen:
            continue
        seen.add((function.qualname, param))
        for node in ast.walk(function.node):
            _read(node, param, function.qualname, reads)
            if isinstance(node, ast.Call):
                todo.extend(_passed_on(node, param, function, source))
    return reads


def _read(node: ast.AST, param: str, where: str, reads: RequestReads) -> None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == param
        and isinstance(node.ctx, ast.Load)
    ):
        reads.required.setdefault(node.attr, where)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and len(node.args) >= 2
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == param
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        name = node.args[1].value
        if node.func.id == "getattr" and len(node.args) == 2:
            reads.required.setdefault(name, where)
        else:
            reads.optional.setdefault(name, where)


def _passed_on(
    call: ast.Call, param: str, caller: _Function, source: _Source
) -> list[tuple[_Function, str]]:
    """The (callee, its parameter) pairs ``call`` hands the request to."""
    callees = _callees(call, caller, source)
    found = []
    for callee in callees:
        params = _parameters(callee.node)
        offset = 1 if callee.owner is not None else 0  # a method's self
        for position, arg in enumerate(call.args):
            if isinstance(arg, ast.Name) and arg.id == param and position + offset < len(params):
                found.append((callee, params[position + offset]))
        for keyword in call.keywords:
            value = keyword.value
            if isinstance(value, ast.Name) and value.id == param and keyword.arg in params:
                found.append((callee, keyword.arg))
    return found


def _callees(call: ast.Call, caller: _Function, source: _Source) -> list[_Function]:
    func = call.func
    if isinstance(func, ast.Name):
        return source.functions.get(func.id, [])
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in ("self", "cls")
        and caller.owner is not None
    ):
        method = source.methods.get((caller.owner, func.attr))
        return [method] if method is not None else []
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return source.functions.get(func.attr, [])  # a loaded module's function
    return []


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
