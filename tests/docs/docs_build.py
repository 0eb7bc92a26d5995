"""Building the site for the docs tests, through ``kvpool docs build``."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from kvpool.conformance.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "mkdocs.yml"

#: The build date every test build takes (``SOURCE_DATE_EPOCH``, which mkdocs honours):
#: it is the one thing of a build that is not its input, the date stamped into
#: sitemap.xml.gz, so builds either side of midnight would differ by it.
BUILD_EPOCH = "1764547200"


def build(out: Path) -> Path:
    """Build the site strictly into ``out``; fail with mkdocs' messages if it does not.

    Run as ``kvpool docs build`` under the ``kvpool`` command, as a reader runs it: click
    settles each command's help option by the first context that asks, so building from
    the ``docs`` group alone would print ``--help`` where ``kvpool`` prints ``-h, --help``.
    """
    arguments = ["docs", "build", "--config", str(CONFIG), "--out", str(out)]
    result = CliRunner().invoke(main, arguments, env={"SOURCE_DATE_EPOCH": BUILD_EPOCH})
    assert result.exit_code == 0, f"kvpool docs build failed:\n{result.output}"
    return out
