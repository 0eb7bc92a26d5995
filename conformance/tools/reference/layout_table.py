"""The architecture page's table of folders, read from the folders themselves.

Each package of the suite says what it is in the first paragraph of its ``__init__``
docstring; the table lists every folder of ``conformance/`` and every folder one level
inside the layers that hold several (the machines, the engines, the tools), with that
paragraph. A folder added without a docstring shows as undocumented, and a test fails on
it; a folder removed leaves the table, since nothing here is typed by hand. The docstrings
are read from the source with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .markdown import table

#: The layers whose folders each get a row of their own.
LAYERS = ("machines", "engines", "tools")

UNDOCUMENTED = "(undocumented: its __init__.py has no docstring)"


def role(package: Path) -> str:
    """The first paragraph of ``package``'s ``__init__`` docstring, on one line."""
    init = package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) if init.is_file() else None
    if not doc:
        return UNDOCUMENTED
    first = " ".join(doc.split("\n\n")[0].split())
    # reST roles and literals as Markdown code: :mod:`.plan` and ``x`` read as `.plan`, `x`
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", first).replace("``", "`")


def folders(root: Path) -> list[Path]:
    """The folders of the suite at ``root`` (its ``conformance/``) the table lists."""
    found: list[Path] = []
    for top in sorted(p for p in root.iterdir() if _is_package(p)):
        found.append(top)
        if top.name in LAYERS:
            found.extend(sorted(p for p in top.iterdir() if _is_package(p)))
    return found


def _is_package(path: Path) -> bool:
    return path.is_dir() and any(path.glob("*.py"))


def layout_table(root: Path) -> str:
    """The Markdown table of :func:`folders`, each with its :func:`role`."""
    rows = [[f"`{p.relative_to(root.parent).as_posix()}/`", role(p)] for p in folders(root)]
    return table(["folder", "what it holds"], rows)
