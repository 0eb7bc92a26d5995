"""``reference/properties.md``: the request level's named properties, each with its statement
and the check that judges it."""

from __future__ import annotations

import ast
import inspect
import types

from kvpool.spec.manager import properties as properties_module
from kvpool.spec.manager.properties import PROPERTIES

from .markdown import GENERATED, code, paragraphs, prose, summary


def checks_of_property() -> dict[str, list[types.FunctionType]]:
    """Property id -> the check functions of :mod:`properties` that can report it (those
    whose code names the id in a string literal)."""
    found: dict[str, list[types.FunctionType]] = {name: [] for name in PROPERTIES}
    for value in vars(properties_module).values():
        if not isinstance(value, types.FunctionType):
            continue
        if value.__module__ != properties_module.__name__:
            continue
        tree = ast.parse(inspect.getsource(value))
        named = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        for name in PROPERTIES:
            if name in named:
                found[name].append(value)
    return found


def properties_page() -> str:
    """The page, in the order of :data:`PROPERTIES`."""
    checks = checks_of_property()
    out = [
        GENERATED,
        "# Request-level properties\n",
        "The request machine (`kvpool conform --machine requests`) runs request actions "
        "through a KV cache manager and checks these after every step, on the spec's manager "
        "over your pool and on your own manager. Each is a check over what can be seen from "
        "outside a manager (block tables, ref counts, keys, block contents), so the same "
        "code judges the spec and any manager under test. See [request "
        "actions](request-actions.md) for the actions themselves.\n",
    ]
    for name, text in PROPERTIES.items():
        out.append(f"## {name}\n")
        out.append(paragraphs(prose(text[0].upper() + text[1:]).rstrip() + "."))
        for check in checks[name]:
            where = code(f"{check.__module__}.{check.__name__}")
            out.append(f"Checked by {where}: {prose(summary(check))}\n")
    return "\n".join(out)
