"""What every command shares: the exit statuses, the way a usage error is printed, and
how a comma-separated list of names is read."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import NoReturn

import click
from rich.console import Console

EXIT_PASS, EXIT_NONCONFORMANCE, EXIT_USAGE, EXIT_TOO_FEW_VALID = 0, 1, 2, 3


def fail_usage(console: Console, message: str) -> NoReturn:
    """Print ``message`` as an error, unwrapped and unformatted, and exit 2."""
    console.print("[red]error:[/red] ", end="")
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    sys.exit(EXIT_USAGE)


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
