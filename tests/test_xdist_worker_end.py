"""A ``pytest -n`` worker whose session end is slow finishes it (the SIGINT guard of
``tests/conftest.py``): a small project whose terminal summary takes 6 s in each worker,
run with the guard and, to show the fault is there, without it. execnet interrupts a
worker still busy five seconds after the controller asked it to stop; with the guard the
worker's own end (its unconfigure) still runs, and execnet's ``os._exit`` ten seconds after
its interrupt leaves room for a loaded machine. Without the guard the workers are cut only
when the controller asks them to stop before their summary has run a second; on a loaded
machine it can ask later, and that run then says it could not show the fault."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

#: A plugin whose summary is slow in a worker and whose unconfigure leaves a mark.
SLOW_SUMMARY = """
import time


def pytest_terminal_summary(config):
    if hasattr(config, "workerinput"):
        time.sleep(6)  # past execnet's 5 s, and well within its 15 s before os._exit


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        open("ended-" + config.workerinput["workerid"], "w").close()
"""
#: The project's tests: two, so that each worker runs one.
TWO_TESTS = "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n"


@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "unguarded"])
def test_a_slow_worker_end_runs_to_its_end(guarded: bool, tmp_path: Path) -> None:
    (tmp_path / "slow_summary.py").write_text(SLOW_SUMMARY)
    (tmp_path / "test_two.py").write_text(TWO_TESTS)
    guard = ["-p", "conftest"] if guarded else []  # tests/conftest.py, as a plugin
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-p", "no:kvpool",
         "-p", "no:hypothesispytest", "-p", "slow_summary", *guard, "test_two.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(HERE)])},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    ended = sorted(p.name for p in tmp_path.glob("ended-*"))
    if guarded:
        assert ended == ["ended-gw0", "ended-gw1"], result.stderr
    elif ended:
        pytest.skip("the controller asked the workers to stop late: no interruption to show")
