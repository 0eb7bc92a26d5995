"""mutmut runs each mutant's tests again in a process that has already run them (its workers
are forked from one that ran the whole suite), so a test that only passes in a fresh process
turns into false kills. The unit tests must pass twice in one process; a test that consumes
module-level state is caught by this check."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

TWICE = """
import sys
import pytest
args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", *sys.argv[1:]]
first = pytest.main(args)
second = pytest.main(args)
print("EXITS", int(first), int(second))
"""


def run_twice(*paths: Path) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", TWICE, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("EXITS"))
    first, second = line.split()[1:]
    return int(first), int(second)


def test_the_unit_tests_pass_twice_in_one_process() -> None:
    assert run_twice(HERE / "impl", HERE / "spec") == (0, 0)


def test_a_test_that_consumes_module_state_is_caught(tmp_path: Path) -> None:
    stateful = tmp_path / "test_stateful.py"
    stateful.write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize("items", [iter([1, 2])])
            def test_reads_its_items(items):
                assert list(items) == [1, 2]
            """
        )
    )
    assert run_twice(stateful) == (0, 1)
