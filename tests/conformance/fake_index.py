"""A fake package index for the tests of the release loader and ``kvpool targets
--latest``: pip is pointed at one folder of wheel files and nothing else (no index, no
configuration, no other links), so the real pip answers and nothing reaches the network."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kvpool.conformance.targets.releases import files


def forget_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """No wheel an earlier test downloaded is at hand: what the test asks for is fetched
    (or fails to be) as in a fresh process."""
    monkeypatch.setattr(files, "LAST_WHEEL", files.LastWheel())


def point_pip_at(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``folder`` the only place pip (and so the suite) finds releases, in a fresh
    process's state."""
    forget_downloads(monkeypatch)
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    return folder
