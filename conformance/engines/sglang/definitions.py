"""Named definitions of an engine file too large to load whole, run from the file itself.

Some of SGLang's files hold one small helper the radix cache needs beside hundreds of
kilobytes of GPU code that imports half the package (``srt/utils/common.py``,
``srt/mem_cache/memory_pool.py``). Such a file is not executed: :func:`definitions_of`
parses it, keeps the top-level ``def``/``class`` statements of the names asked for (and
nothing else), and executes just those, compiled under the file's own path, in a namespace
holding what their bodies name. The code that runs is the release's text, unchanged; a
name the file does not define is an error naming the file.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType


class DefinitionsError(Exception):
    """The file could not be read, or lacks a definition asked for."""


def definitions_of(
    path: Path, names: tuple[str, ...], namespace: Mapping[str, object]
) -> dict[str, object]:
    """The top-level functions and classes ``names`` of the Python file ``path``, executed
    in a copy of ``namespace`` (with ``from __future__ import annotations`` in force when
    the file has it); by name."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        raise DefinitionsError(f"cannot read {path}: {exc}") from exc
    kinds = (ast.FunctionDef, ast.ClassDef)
    found = {node.name: node for node in tree.body if isinstance(node, kinds)}
    missing = [name for name in names if name not in found]
    if missing:
        raise DefinitionsError(f"{path} defines no {', '.join(missing)}")
    future = [
        node
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "__future__"
    ]
    code = ast.Module(body=[*future, *(found[name] for name in names)], type_ignores=[])
    # a module of its own, in sys.modules while it runs: a dataclass looks its module up
    module = ModuleType(f"kvpool_definitions_{path.stem}", f"definitions read from {path}")
    module.__dict__.update(namespace)
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, str(path), "exec"), module.__dict__)
    except Exception as exc:
        raise DefinitionsError(
            f"defining {', '.join(names)} of {path} failed: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        del sys.modules[module.__name__]
    return {name: module.__dict__[name] for name in names}
