"""A seed names one run: the same seed draws the same test cases whatever else the process
has imported (Hypothesis would otherwise draw literals from the source of every local
module loaded, a set that grows with each import; see conformance/engine/source_constants.py)."""

from __future__ import annotations

import subprocess
import sys

RUN = """
import contextlib, sys
from kvpool.conformance.engine import runner
from kvpool.conformance.engine.levels import SAFETY
from kvpool.conformance.targets.loading import load_target
from kvpool.spec.profile import SEED
if "whole-package" in sys.argv:
    import kvpool.conformance.cli  # every command, so most of our modules
if "unfixed" in sys.argv:
    runner.without_source_constants = contextlib.nullcontext
factory, _ = load_target("impl")
result = runner.run_level(factory, SEED, SAFETY, max_examples=150, steps=40, seed=2, max_blocks=8)
print("STEPS", result.record.steps)
"""


def steps(*mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", RUN, *mode], capture_output=True, text=True, timeout=300
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("STEPS")), None)
    assert line is not None, out.stderr
    return int(line.split()[1])


def test_a_seed_draws_the_same_run_whatever_was_imported() -> None:
    assert steps() == steps("whole-package")


def test_without_the_guard_the_imports_change_the_run() -> None:
    # the control: the check above can fail, and fails for the reason it names
    assert steps("unfixed") != steps("unfixed", "whole-package")
