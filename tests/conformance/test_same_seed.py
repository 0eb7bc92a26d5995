"""A seed names one run: the same seed draws the same test cases in every process, whatever
else the process has imported.

``kvpool conform`` draws with a seeded ``random.Random`` (engine/seeded_search.py), which
reads nothing but its seed. Hypothesis, which draws each test case's seed in ``kvpool
fuzz`` (and the actions of ``kvpool diff``), would otherwise draw literals from the source
of every local module loaded, a set that grows with each import
(conformance/machines/pool/source_constants.py keeps them out)."""

from __future__ import annotations

import subprocess
import sys

RUN = """
import contextlib, sys
from kvpool.conformance.machines.pool import runner
from kvpool.conformance.machines.pool.levels import SAFETY
from kvpool.conformance.machines.pool.lockstep import RunRecord
from kvpool.conformance.machines.pool.machine import pool_case
from kvpool.conformance.tools.fuzz import hunt
from kvpool.conformance.targets.loading import load_target
from kvpool.spec.profile import SEED
seed = int(sys.argv[1])
if "whole-package" in sys.argv:
    import kvpool.conformance.cli  # every command, so most of our modules
if "unfixed" in sys.argv:
    hunt.without_source_constants = contextlib.nullcontext
factory, _ = load_target("impl")
if "hypothesis" in sys.argv:
    from hypothesis.database import InMemoryExampleDatabase
    record = RunRecord()
    cases = hunt.Cases(pool_case(factory, SEED, SAFETY, 8), frozenset(), lambda record: None)
    database = InMemoryExampleDatabase()
    hunt.hunt(cases, record, database=database, key=b"k", replay=False, max_examples=150,
              steps=40, seed=seed)
else:
    result = runner.run_level(
        factory, SEED, SAFETY, max_examples=150, steps=40, seed=seed, max_blocks=8
    )
    record = result.record
print("STEPS", record.steps, sorted(record.operations.items()), sorted(record.cells.items()))
"""


def drawn(seed: int, *mode: str) -> str:
    """What one run in a fresh process drew: its steps, operations and cells."""
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(seed), *mode], capture_output=True, text=True, timeout=300
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("STEPS")), None)
    assert line is not None, out.stderr
    return line


def test_a_seed_draws_the_same_run_whatever_was_imported() -> None:
    assert drawn(2) == drawn(2, "whole-package")


def test_another_seed_draws_another_run() -> None:
    # the control: the comparison above can tell two runs apart
    assert drawn(2) != drawn(3)


def test_a_hypothesis_machine_draws_the_same_run_whatever_was_imported() -> None:
    assert drawn(2, "hypothesis") == drawn(2, "hypothesis", "whole-package")


def test_without_the_guard_the_imports_change_a_hypothesis_run() -> None:
    # the control: the check above can fail, and fails for the reason it names
    assert drawn(2, "hypothesis", "unfixed") != drawn(2, "hypothesis", "unfixed", "whole-package")
