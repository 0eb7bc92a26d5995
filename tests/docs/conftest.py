"""Shared by the docs tests: the site, built once per test run with ``kvpool docs build``.

Under ``pytest -n`` every worker that runs a docs test needs the site; a session fixture
alone would build it once per worker (about ten CPU-seconds each). So the workers of one
run build it once between them: the first to ask builds it into the run's own temporary
folder (the parent of every worker's) under a file lock, and the others wait and read it.
The site is only read by the tests (a test that changes it copies it first).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from docs_build import build


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole site, built strictly (any warning fails the build, and this fixture)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build(tmp_path_factory.mktemp("site"))
    run = tmp_path_factory.getbasetemp().parent  # every worker's basetemp is in it
    site, done = run / "site", run / "site.built"
    with open(run / "site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            build(site)
            done.touch()
    return site
