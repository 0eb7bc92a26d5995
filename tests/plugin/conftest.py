"""The plugin's tests make fresh projects with pytester (each test module enables it:
``pytest_plugins`` is refused in a conftest.py below the top level)."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The user's pool module every fresh project holds, as ``mypool.py``.
POOL_SOURCE = (Path(__file__).parent / "small_pool.py").read_text(encoding="utf-8")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A fresh project holding only the user's pool module."""
    pytester.makepyfile(mypool=POOL_SOURCE)
    return pytester
