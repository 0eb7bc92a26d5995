"""Helpers of the fuzz tests: running a campaign here or as a separate process."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from click.testing import CliRunner, Result
from kvpool.conformance.tools.fuzz.command import fuzz

#: tests/conformance, where the planted faults (faulty_pools.py) live.
PLANTED = Path(__file__).parents[1] / "conformance"


def run_fuzz(*args: str) -> Result:
    """``kvpool fuzz ARGS`` in this process (the workers are real processes)."""
    return CliRunner().invoke(fuzz, list(args), catch_exceptions=False)


def actions_run(output: str) -> int:
    """The lockstep actions the final line of a campaign reports."""
    found = re.search(r"([\d,]+) lockstep actions in", output)
    assert found, output
    return int(found.group(1).replace(",", ""))


def fuzz_command(*args: str) -> list[str]:
    """``kvpool fuzz ARGS`` as a separate process (``python -m``)."""
    return [sys.executable, "-m", "kvpool.conformance.tools.fuzz", *args]
