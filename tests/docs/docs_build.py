"""Building the site for the docs tests, through ``kvpool docs build``."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from kvpool.conformance.reference.command import docs

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "mkdocs.yml"


def build(out: Path) -> Path:
    """Build the site strictly into ``out``; fail with mkdocs' messages if it does not."""
    result = CliRunner().invoke(docs, ["build", "--config", str(CONFIG), "--out", str(out)])
    assert result.exit_code == 0, f"kvpool docs build failed:\n{result.output}"
    return out
