"""Building the site for the docs tests, through ``kvpool docs build``."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from kvpool.conformance.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "mkdocs.yml"


def build(out: Path) -> Path:
    """Build the site strictly into ``out``; fail with mkdocs' messages if it does not.

    Run as ``kvpool docs build`` under the ``kvpool`` command, as a reader runs it: click
    settles each command's help option by the first context that asks, so building from
    the ``docs`` group alone would print ``--help`` where ``kvpool`` prints ``-h, --help``.
    """
    result = CliRunner().invoke(main, ["docs", "build", "--config", str(CONFIG), "--out", str(out)])
    assert result.exit_code == 0, f"kvpool docs build failed:\n{result.output}"
    return out
