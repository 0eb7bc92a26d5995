"""Shared by the docs tests: the site, built once per session with ``kvpool docs build``."""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_build import build


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole site, built strictly (any warning fails the build, and this fixture)."""
    return build(tmp_path_factory.mktemp("site"))
