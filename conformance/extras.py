"""Commands whose tools are optional installs say so, instead of failing on an import."""

from __future__ import annotations

import importlib.util
import sys

from rich.console import Console

from .usage import EXIT_USAGE


def require(module: str, package: str, command: str) -> None:
    """Exit 2 with the install line when ``module`` (from ``package``) is missing."""
    if importlib.util.find_spec(module) is None:
        Console(stderr=True).print(
            f"[red]error:[/red] {command} needs {package}: pip install {package} "
            f"(or install kvpool-spec with its test extra: pip install 'kvpool-spec[test]')",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_USAGE)
