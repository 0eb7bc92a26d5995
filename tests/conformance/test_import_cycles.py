"""No import cycle inside ``kvpool.conformance``: the package reads as layers (engine, targets,
tools, commands), each importing only what sits below it.

The graph is built from the source with ``ast``, not by importing: every ``import`` counts,
at module level, inside a function (a deferred import is still a dependency) or under
``TYPE_CHECKING``, and so does a command registered by name (``".bench.command:bench"``,
the lazy form ``cli.py`` uses)."""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import kvpool.conformance

PACKAGE = "kvpool.conformance"
ROOT = Path(kvpool.conformance.__file__).parent

#: A command registered by name: ``".module.path:attribute"``, relative to its package.
REGISTERED = re.compile(r"^(\.+[\w.]+):\w+$")


def modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module under ``root`` by its dotted name: its file, and whether it is a package."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join([package, *parts])] = (path, is_package)
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([name] if name else [])])


def imported(module: str, is_package: bool, tree: ast.AST, known: set[str]) -> Iterator[str]:
    """The modules of ``known`` that ``module`` imports, anywhere in its source."""
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = (
                _absolute(module, is_package, node.level, node.module)
                if node.level
                else (node.module or "")
            )
            # ``from pkg import name``: the submodule when ``name`` is one, else ``pkg``
            names = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                for alias in node.names
            ]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            registered = REGISTERED.match(node.value)
            if registered:
                dots = len(registered[1]) - len(registered[1].lstrip("."))
                names = [_absolute(module, is_package, dots, registered[1].lstrip("."))]
        for name in names:
            # ``import a.b.c`` loads a.b.c; the longest known prefix is the module meant
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    found = modules(root, package)
    known = set(found)
    return {
        name: set(imported(name, is_package, ast.parse(path.read_text()), known))
        for name, (path, is_package) in found.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module, as the
    path of imports that closes it (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return [_path_through(graph, component) for component in components]


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest import path from the component's first module back to itself."""
    first = min(component)
    paths = {first: [first]}
    frontier = [first]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == first:
                    return [*paths[node], first]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {first}")  # a component always has one


def test_no_import_cycle_inside_the_package() -> None:
    graph = import_graph(ROOT)
    assert len(graph) > 150  # the whole package was read, not an empty folder
    assert f"{PACKAGE}.machines.pool.lockstep" in graph[f"{PACKAGE}.machines.pool.runner"]
    found = cycles(graph)
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_a_deferred_import_that_closes_a_circle_is_caught(tmp_path: Path) -> None:
    """The control: the package with one planted cycle, closed by an import inside a
    function (as the removed ``diff/record`` <-> ``trace/record`` circle was)."""
    copy = tmp_path / "conformance"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    levels = copy / "machines" / "pool" / "levels.py"
    levels.write_text(
        levels.read_text() + "\n\ndef _planted() -> None:\n    from ...cli import main\n"
    )
    found = cycles(import_graph(copy))
    assert len(found) == 1, found
    assert found[0][0] == found[0][-1]
    assert {f"{PACKAGE}.machines.pool.levels", f"{PACKAGE}.cli"} <= set(found[0])


def test_a_command_registered_by_name_counts_as_an_import(tmp_path: Path) -> None:
    """The circle ``reference/cli_page`` -> ``cli`` -> (``"docs"``, registered by name) ->
    ``reference/command`` -> ``pages`` -> ``cli_page`` ran through such a registration."""
    package = tmp_path / "pkg"
    (package / "tools").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tools" / "__init__.py").write_text("")
    (package / "cli.py").write_text('LAZY = {"page": ".tools.page:page"}\n')
    (package / "tools" / "page.py").write_text("def page() -> None:\n    from ..cli import LAZY\n")
    graph = import_graph(package, "pkg")
    assert graph["pkg.cli"] == {"pkg.tools.page"}
    assert cycles(graph) == [["pkg.cli", "pkg.tools.page", "pkg.cli"]]
    # and without the registration there is none
    (package / "cli.py").write_text("LAZY = {}\n")
    assert cycles(import_graph(package, "pkg")) == []
