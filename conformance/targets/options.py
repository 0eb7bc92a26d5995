"""``--target`` and ``--manager`` as click parameter types: the command line reads each
once, into a :class:`~.description.TargetDescription`, and a text that names nothing is a
usage error (exit 2) listing the forms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

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
        package = ctx.meta.get(PACKAGE_KEY) if ctx is not None else None
        try:
            return describe_target(str(value), package)
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

#: Where ``--package`` leaves its value for ``--target`` (read before it: eager).
PACKAGE_KEY = "kvpool.package"
Command = TypeVar("Command", bound=Callable[..., Any])


def _keep_package(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    ctx.meta[PACKAGE_KEY] = value


def package_option(command: Command) -> Command:
    """``--package NAME``: the top-level package of a vLLM fork's files, for ``--target``
    (read first, so that ``--target`` is parsed once, with it)."""
    option = click.option(
        "--package",
        metavar="NAME",
        default=None,
        is_eager=True,
        expose_value=False,
        callback=_keep_package,
        help="The top-level package a vLLM-shaped target's files live in (a fork's: "
        "aphrodite for aphrodite/v1/core/block_pool.py). Default: the one package of "
        "PATH with v1/core/block_pool.py, or the engine's own.",
    )
    return option(command)


def text_of(value: TargetDescription | str | None) -> str | None:
    """What was typed for an option read by :data:`TARGET` or :data:`MANAGER` (traces and
    replay commands quote it)."""
    return value.text if isinstance(value, TargetDescription) else value
