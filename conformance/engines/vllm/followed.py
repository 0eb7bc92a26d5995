"""The modules of a release that its pool's (and manager's) files import and that load on
a CPU, found by reading the release's own source.

The pool's files import helpers from the rest of the package (``vllm.utils.gc_utils``,
``vllm.v1.token_buffer``, ``vllm.utils.math_utils``, ...). Such a helper is loaded from
the release itself whenever it can be: every module the kept files import is followed,
and so is every module those import, except a package's ``__init__.py`` (it imports most
of the engine), a module importing torch or triton at its top level (kernels, tensors:
never loadable here), and the few modules the suite gives stand-ins of its own
(:data:`~.isolation.SPECIAL`). The rest may still fail to load (a third-party module
missing here); the loader then puts a placeholder in its place, which refuses to be used.

The manager's and the publisher's own files are never followed: each is kept in its own
cache folder and loaded only when asked for. The same reading decides which files the
cache keeps of a wheel and which modules are
loaded from a source tree, so a release loads alike from either.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

#: Modules whose top-level import means the module cannot load here.
HEAVY = frozenset({"torch", "triton"})
#: The most modules followed for one release (each is read and parsed).
MAX_FOLLOWED = 256

#: Reads the named files of a release (paths inside it) that exist.
Reader = Callable[[frozenset[str]], dict[str, bytes]]


def path_of(name: str) -> str:
    """``vllm/utils/gc_utils.py`` for module ``vllm.utils.gc_utils``."""
    return name.replace(".", "/") + ".py"


def followed_modules(
    read: Reader, roots: Iterable[tuple[str, bytes]], package: str, skip: Iterable[str] = ()
) -> dict[str, str]:
    """The modules of ``package`` followed from ``roots`` (module name, its source), as
    module name -> path; ``skip`` names modules never followed (the kept files themselves,
    the suite's stand-ins)."""
    left_out = set(skip)
    kept: dict[str, str] = {}
    wanted: set[str] = set()
    for name, source in roots:
        left_out.add(name)
        wanted |= imported(source, name, package)
    while wanted and len(kept) < MAX_FOLLOWED:
        level = sorted(wanted - left_out - set(kept))[: MAX_FOLLOWED - len(kept)]
        left_out.update(level)
        found = read(frozenset(path_of(n) for n in level))
        wanted = set()
        for name in level:
            text = found.get(path_of(name))
            if text is None or imports_heavy(text):
                continue
            kept[name] = path_of(name)
            wanted |= imported(text, name, package)
    return kept


def imported(source: bytes, name: str, package: str) -> set[str]:
    """The modules of ``package`` that ``source`` (module ``name``) imports anywhere (at
    its top, or inside a function), and the submodules a ``from X import y`` may name."""
    tree = _parse(source, name)
    if tree is None:
        return set()
    found: set[str] = set()
    for node in _run(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if _inside(a.name, package))
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, name)
            if module is None or not (module == package or _inside(module, package)):
                continue
            if module != package:
                found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names if a.name != "*")
    return found


def imports_heavy(source: bytes) -> bool:
    """Whether ``source`` imports torch or triton at its top level."""
    tree = _parse(source, "module")
    if tree is None:
        return True  # a file that does not parse cannot load either
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in HEAVY for a in node.names):
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] in HEAVY
        ):
            return True
    return False


def _run(tree: ast.Module) -> list[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (never run)."""
    nodes: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and _type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return nodes


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _parse(source: bytes, name: str) -> ast.Module | None:
    try:
        return ast.parse(source, filename=name)
    except (SyntaxError, ValueError):
        return None


def _absolute(node: ast.ImportFrom, name: str) -> str | None:
    if node.level == 0:
        return node.module
    parts = name.split(".")[: -node.level]
    if not parts:
        return None
    return ".".join([*parts, *([node.module] if node.module else [])])


def _inside(name: str, package: str) -> bool:
    return name.startswith(f"{package}.")


def follow_members(
    read: Reader, members: Iterable[str], package: str, skip: Iterable[str]
) -> frozenset[str]:
    """The paths of the modules followed from the kept ``members`` (paths of a wheel):
    what the cache keeps beside them."""
    modules = sorted(m for m in members if m.endswith(".py") and not m.endswith("__init__.py"))
    sources = read(frozenset(modules))
    roots = [(m.removesuffix(".py").replace("/", "."), sources[m]) for m in modules if m in sources]
    return frozenset(followed_modules(read, roots, package, skip).values())
