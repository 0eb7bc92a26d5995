"""A copy of an SGLang release's cached files with one line of one file replaced: where
the SGLang tests plant a fault in the engine's own code (the release itself is never
edited)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def planted_tree(
    root: Path, tmp_path_factory: pytest.TempPathFactory, rel: str, line: str, replacement: str
) -> Path:
    """A copy of ``root`` whose ``sglang/REL`` has its one ``line`` replaced."""
    copy = tmp_path_factory.mktemp("sglang") / "release"
    shutil.copytree(root, copy)
    path = copy / "sglang" / rel
    source = path.read_text(encoding="utf-8")
    assert source.count(line) == 1, (rel, line)
    path.write_text(source.replace(line, replacement), encoding="utf-8")
    return copy
