"""An engine's ``NAME==X.Y.Z`` and ``NAME@PATH`` targets, loaded the one way every entry
shares: a release through the loader's cache, a tree from the folder the target names,
and whatever the engine says it cannot load as one target-loading error naming the
target (exit status 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..description import Form, TargetDescription
from ..errors import TargetLoadError
from ..trees import tree_root

Loaded = TypeVar("Loaded")


def load_form(
    described: TargetDescription,
    from_tree: Callable[[Path], Loaded],
    from_release: Callable[[str], Loaded],
    unavailable: type[Exception],
) -> Loaded:
    """``from_tree(root)`` for ``NAME@PATH``, else ``from_release(version)``; an
    ``unavailable`` error of the engine becomes :class:`~..errors.TargetLoadError`."""
    try:
        if described.form is Form.PATH:
            return from_tree(tree_root(described))
        return from_release(described.version or "")
    except unavailable as exc:
        raise TargetLoadError(f"{described.text}: {exc}") from exc


def release_name(described: TargetDescription, suffix: str = "") -> str:
    """How a target is shown: the text of a tree's form, ``NAME==X.Y.Z`` (and ``suffix``)
    for a release."""
    if described.form is Form.PATH:
        return described.text
    return f"{described.engine}=={described.version}{suffix}"
