"""What every command shares: the exit statuses and the way a usage error is printed."""

from __future__ import annotations

import sys
from typing import NoReturn

from rich.console import Console

EXIT_PASS, EXIT_NONCONFORMANCE, EXIT_USAGE, EXIT_TOO_FEW_VALID = 0, 1, 2, 3


def fail_usage(console: Console, message: str) -> NoReturn:
    """Print ``message`` as an error, unwrapped and unformatted, and exit 2."""
    console.print("[red]error:[/red] ", end="")
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    sys.exit(EXIT_USAGE)
