"""The folder a ``NAME@PATH`` target names, checked once for every engine."""

from __future__ import annotations

from pathlib import Path

from .description import TargetDescription
from .errors import TargetLoadError


def tree_root(described: TargetDescription) -> Path:
    """The folder ``described`` names, or :class:`~.errors.TargetLoadError` saying it is
    not one."""
    root = (described.path or Path()).expanduser()
    if not root.is_dir():
        raise TargetLoadError(f"{described.text}: {root} is not a folder")
    return root
