"""Shared set-up of the fuzz tests: the planted faults importable, a scratch directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_helpers import PLANTED  # pytest puts this folder on sys.path


@pytest.fixture(autouse=True)
def _scratch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Workers are spawned with this process's sys.path and working directory.
    monkeypatch.syspath_prepend(str(PLANTED))
    monkeypatch.chdir(tmp_path)
