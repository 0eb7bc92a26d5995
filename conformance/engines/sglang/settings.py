"""SGLang's server settings as its scheduler reads them (``get_exec().features.X``,
``get_schedule().X``, ...), at the defaults the release itself declares.

SGLang 0.5 declares every server setting once, in ``srt/arg_groups/fields/*.py``: a class
per namespace (``_NS_PATH = "exec.features"``) whose annotated fields carry their
defaults; ``ServerArgs`` resolves them at launch (many from the GPU and the model) and
``runtime_context`` publishes them as read-only bags. Neither can run without a model and a
GPU, so :func:`declared_settings` reads the declarations' literal defaults out of the
release's files (parsed, never executed) into :class:`Bag` trees, and the driver adds the
few the suite's setup decides (the page size, the batch budget), saying so. A setting the
release declares without a literal default (resolved at launch) and the driver did not
give is no guess: reading it raises :class:`SettingNotGiven`, a loading error naming it,
never a finding. It is not an ``AttributeError``, so no ``getattr(..., default)`` of
SGLang's quietly takes another branch.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The declaration files, relative to the package folder (0.5.23's: one per namespace).
FIELDS = tuple(
    f"srt/arg_groups/fields/{name}.py"
    for name in (
        "device", "disagg", "exec_", "lora", "memory", "mm", "model",
        "observability", "parallel", "schedule", "serving", "spec",
    )
)  # fmt: skip


class SettingNotGiven(RuntimeError):
    """SGLang's code read a setting the suite has no value for."""


class Bag:
    """One namespace of settings (``exec``, ``exec.features``): its leaves and sub-bags as
    attributes; any other name read raises :class:`SettingNotGiven`."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and friends probe for these
            raise AttributeError(name)
        raise SettingNotGiven(
            f"SGLang read the server setting {self._path}.{name}, which kvpool's driver "
            "does not give (the release declares no literal default for it, or none at all)"
        )

    def sub(self, path: str) -> Bag:
        """The bag at ``path`` under this one (``features``, ``mamba``), made if absent."""
        bag = self
        for part in path.split("."):
            child = bag.__dict__.get(part)
            if not isinstance(child, Bag):
                child = Bag(f"{bag._path}.{part}")
                setattr(bag, part, child)
            bag = child
        return bag

    def give(self, **values: object) -> None:
        """Set leaves of this bag (the driver's own settings, over the declared ones)."""
        for name, value in values.items():
            setattr(self, name, value)


def declared_settings(package: Path) -> dict[str, Bag]:
    """The top-level bags (``exec``, ``schedule``, ...) with every field that
    ``package``'s declarations give a literal default."""
    tops: dict[str, Bag] = {}
    for rel in FIELDS:
        path = package / rel
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                _read_class(node, tops)
    return tops


def _read_class(node: ast.ClassDef, tops: dict[str, Bag]) -> None:
    where = _namespace_of(node)
    if where is None:
        return
    top, _, rest = where.partition(".")
    bag = tops.setdefault(top, Bag(top))
    if rest:
        bag = bag.sub(rest)
    for statement in node.body:
        if not isinstance(statement, ast.AnnAssign) or statement.value is None:
            continue
        if not isinstance(statement.target, ast.Name):
            continue
        try:
            value = ast.literal_eval(statement.value)
        except ValueError:  # a Derived(...) or a call: resolved at launch
            continue
        bag.give(**{statement.target.id: value})


def _namespace_of(node: ast.ClassDef) -> str | None:
    for statement in node.body:
        if (
            isinstance(statement, ast.Assign)
            and [getattr(t, "id", None) for t in statement.targets] == ["_NS_PATH"]
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            return statement.value.value
    return None


def bag_values(bag: Bag) -> Mapping[str, object]:
    """``bag``'s leaves and sub-bags by name (for tests and messages)."""
    return {k: v for k, v in vars(bag).items() if not k.startswith("_")}
