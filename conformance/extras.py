"""Commands whose tools are optional installs say so, instead of failing on an import."""

from __future__ import annotations

import importlib.util
import sys

from rich.console import Console

from .install import extra_hint
from .usage import EXIT_USAGE


def require(module: str, package: str, command: str) -> None:
    """Exit 2 with the install line when ``module`` (from ``package``) is missing."""
    if importlib.util.find_spec(module) is None:
        Console(stderr=True).print(
            f"[red]error:[/red] {command} needs {package}: pip install {package} "
            f"(or kvpool-spec's test extra: {extra_hint('test')})",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_USAGE)
