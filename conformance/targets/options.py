"""``--target`` and ``--manager`` as click parameter types: the command line reads each
once, into a :class:`~.description.TargetDescription`, and a text that names nothing is a
usage error (exit 2) listing the forms."""

from __future__ import annotations

from typing import Any

import click

from .description import TargetDescription
from .errors import TargetLoadError
from .registry import describe_target


class TargetType(click.ParamType[TargetDescription]):
    """``--target``: a description, read by :func:`~.registry.describe_target`."""

    name = "TARGET"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> TargetDescription:
        if isinstance(value, TargetDescription):
            return value
        try:
            return describe_target(str(value))
        except TargetLoadError as exc:
            self.fail(str(exc), param, ctx)


class ManagerType(click.ParamType[TargetDescription | str]):
    """``--manager``: ``auto``, ``none`` (kept as text) or a description."""

    name = "MANAGER"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> TargetDescription | str:
        if isinstance(value, TargetDescription):
            return value
        if value in ("auto", "none"):
            return str(value)
        try:
            return describe_target(str(value))
        except TargetLoadError as exc:
            message = str(exc).replace("unknown target", "unknown manager", 1)
            self.fail(f"{message}\n--manager also takes auto or none", param, ctx)


TARGET = TargetType()
MANAGER = ManagerType()


def text_of(value: TargetDescription | str | None) -> str | None:
    """What was typed for an option read by :data:`TARGET` or :data:`MANAGER` (traces and
    replay commands quote it)."""
    return value.text if isinstance(value, TargetDescription) else value
