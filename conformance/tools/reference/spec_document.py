"""``reference/spec.md``: the whole spec as one linear document, generated from its source at
build time: the state, the invariants, the rules and search bounds, every operation with its
code, the events, then the request level. Each module's docstring is its prose; each
top-level definition gets a heading of its own (a link target for a code review) and its
source, comments included. Pinned to the installed kvpool-spec version."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
from types import ModuleType

from .markdown import GENERATED, fence, paragraphs, prose

#: The spec's modules in reading order, under the part each belongs to.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("The state", ("config", "versions", "profile", "state", "keys", "hashing", "events")),
    (
        "The invariants and the caller's contract",
        ("invariants", "errors", "rules", "bounds", "files"),
    ),
    ("The flat rules", ("flat",)),
    (
        "The operations",
        ("actions", "observation", "allocation", "caching", "queries", "step"),
    ),
    ("What a subscriber of the KV events rebuilds", ("consumer",)),
    (
        "The request level",
        (
            "manager.config",
            "manager.extra_keys",
            "manager.report",
            "manager.state",
            "manager.actions",
            "manager.flat",
            "manager.lookup",
            "manager.compute",
            "manager.admission",
            "manager.pool",
            "manager.release",
            "manager.properties",
            "manager.step",
        ),
    ),
)


def _definitions(module: ModuleType) -> list[tuple[str, str]]:
    """``(name, source)`` of each top-level definition of ``module``, with the comments
    written above it; imports and the module docstring left out, loose statements (module
    constants and tables) kept under the name of what they assign."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    tree = ast.parse(source)
    out: list[tuple[str, str]] = []
    start = 0
    for i, node in enumerate(tree.body):
        end = node.end_lineno or node.lineno
        chunk = "\n".join(lines[start:end]).strip("\n")
        start = end
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the module docstring: shown as prose
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            name = node.name
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            name = ast.unparse(target)
        else:
            name = ""
        out.append((name, chunk.strip()))
    return out


def _module_section(name: str) -> str:
    module = importlib.import_module(f"kvpool.spec.{name}")
    parts = [f"### `kvpool.spec.{name}`\n"]
    doc = inspect.getdoc(module)
    if doc:
        parts.append(paragraphs(prose(doc)))
    loose: list[str] = []
    for definition, chunk in _definitions(module):
        if not definition or definition.isupper() or "." in definition:
            loose.append(chunk)
            continue
        if loose:
            parts.append(fence("\n\n".join(loose), "python"))
            loose = []
        parts.append(f"#### `{definition}` {{ #{name.replace('.', '-')}-{definition} }}\n")
        parts.append(fence(chunk, "python"))
    if loose:
        parts.append(fence("\n\n".join(loose), "python"))
    return "\n".join(parts)


def spec_document() -> str:
    """The whole page."""
    version = importlib.metadata.version("kvpool-spec")
    out = [
        GENERATED,
        "# The spec in one document\n",
        f"kvpool-spec {version}: every module of `kvpool.spec`, in reading order, with its "
        "code, generated from the installed package when this site was built. Link a "
        "definition's heading in a review; the [guide](../guide/semantics.md) says the same "
        "in words, and each [operation page](actions/index.md) shows one operation with the "
        "call a pool implements.\n",
    ]
    for title, modules in PARTS:
        out.append(f"## {title}\n")
        out.extend(_module_section(name) for name in modules)
    return "\n".join(out)
