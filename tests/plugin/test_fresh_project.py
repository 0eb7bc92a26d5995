"""Done when the plugin runs in a fresh project with one flag: a real ``python -m pytest`` in
a directory holding only the user's pool module, nothing configured; and loading the plugin
costs every other pytest run nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import POOL_SOURCE  # pytest puts this folder on sys.path


def _clean_env() -> dict[str, str]:
    """This environment without anything that would configure pytest or Python paths."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "PYTHONPATH", "HYPOTHESIS"))
    }


def test_one_flag_in_a_fresh_project(tmp_path: Path) -> None:
    (tmp_path / "mypool.py").write_text(POOL_SOURCE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--kvpool-target=mypool:make_pool"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "collected 4 items" in done.stdout
    assert "4 passed" in done.stdout
    assert "kvpool conform — target mypool:make_pool" in done.stdout
    # caches (.pytest_cache, Hypothesis's .hypothesis, __pycache__) aside, a pass writes nothing
    written = {p.name for p in tmp_path.iterdir() if not p.name.startswith((".", "__"))}
    assert written == {"mypool.py"}, written


def test_loading_the_plugin_imports_nothing_of_the_suite() -> None:
    probe = (
        "import sys, kvpool.conformance.pytest_plugin\n"
        "heavy = ('hypothesis', 'rich', 'click', 'kvpool.spec',"
        " 'kvpool.conformance.machines.pool.runner')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=_clean_env()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
