"""What every command shares: the exit statuses, the way a usage error and a bug of
kvpool itself are printed, and how a comma-separated list of names is read.

Every ``kvpool`` command ends with one of these statuses, and each status means one
thing only:

====  ======================  ===========================================================
0     :data:`EXIT_PASS`       conformant: every check ran and passed
1     :data:`EXIT_FINDING`    a finding: the target (or the checked thing) broke a rule
2     :data:`EXIT_USAGE`      a usage error, or the target could not be loaded or does
                              not offer what the chosen checks call
3     :data:`EXIT_TOO_FEW`    too few valid test cases for the verdict to stand
4     :data:`EXIT_BUG`        a bug in kvpool itself (the traceback is printed)
====  ======================  ===========================================================
"""

from __future__ import annotations

import shlex
import sys
import traceback
from collections.abc import Iterable
from typing import NoReturn

import click
from rich.console import Console

EXIT_PASS = 0
EXIT_FINDING = 1
EXIT_USAGE = 2
EXIT_TOO_FEW = 3
EXIT_BUG = 4

#: Each status with what it means, for ``--help`` texts and the docs' exit-status page.
EXIT_MEANINGS: dict[int, str] = {
    EXIT_PASS: "conformant: every check ran and passed",
    EXIT_FINDING: "a finding: a rule was broken",
    EXIT_USAGE: "a usage error, a target that cannot be loaded, or a target that does not "
    "offer what the chosen checks call",
    EXIT_TOO_FEW: "too few valid test cases for the verdict to stand",
    EXIT_BUG: "a bug in kvpool itself",
}


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
