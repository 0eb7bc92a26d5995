"""What every command shares: the way a usage error and a bug of kvpool itself are
printed, and how a comma-separated list of names is read. The exit statuses themselves are
:mod:`.exits`' policy (re-exported here for the commands that print and exit)."""

from __future__ import annotations

import shlex
import sys
import traceback
from collections.abc import Iterable
from typing import NoReturn

import click
from rich.console import Console

from .exits import (
    EXIT_BUG,
    EXIT_FINDING,
    EXIT_INTERRUPTED,
    EXIT_PASS,
    EXIT_TOO_FEW,
    EXIT_UNDECIDED,
    EXIT_USAGE,
)

__all__ = [
    "EXIT_BUG",
    "EXIT_FINDING",
    "EXIT_INTERRUPTED",
    "EXIT_PASS",
    "EXIT_TOO_FEW",
    "EXIT_UNDECIDED",
    "EXIT_USAGE",
    "comma_names",
    "fail_bug",
    "fail_usage",
    "invoked_command",
]


def fail_usage(console: Console, message: str) -> NoReturn:
    """Print ``message`` as an error, unwrapped and unformatted, and exit 2."""
    console.print("[red]error:[/red] ", end="")
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    sys.exit(EXIT_USAGE)


def invoked_command(argv: list[str] | None = None) -> str:
    """The command line that was run, quoted so that it can be pasted back."""
    words = list(sys.argv if argv is None else argv)
    if words and argv is None:
        words[0] = "kvpool"
    return shlex.join(words)


def fail_bug(console: Console, exc: BaseException, command: str | None = None) -> NoReturn:
    """An exception no check expects (kvpool's own code failed): print that this is a bug
    in kvpool, the command that reproduces it and the traceback, and exit 4."""
    console.print("[red]error: this is a bug in kvpool[/red], not a finding about the target.")
    console.print("Please report it with the command and the traceback below.", highlight=False)
    console.print(
        f"Reproduce with: {command or invoked_command()}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    console.print(text, markup=False, highlight=False, soft_wrap=True, end="")
    sys.exit(EXIT_BUG)


def comma_names(value: str, known: Iterable[str], what: str) -> list[str]:
    """A comma-separated list of names (``--level safety,order``), each one of ``known``;
    a usage error naming the unknown ones otherwise."""
    known = list(known)
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown {what}(s) {', '.join(unknown) or repr(value)}; choose from {', '.join(known)}"
        )
    return names
