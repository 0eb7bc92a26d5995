"""pytest plugin for .ci/mutmut: run each mutant's tests fastest first.

mutmut hands pytest the tests that reach a mutated function as an unordered set and stops
at the first failure (-x). Ordering them by the durations mutmut measured in its clean run
lets a cheap test kill the mutant before an expensive one starts. Before those durations
exist (the clean run itself) the order is left alone.
"""

import json
from pathlib import Path

import pytest

STATS = Path("mutmut-stats.json")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not STATS.exists():
        return
    duration_by_test: dict[str, float] = json.loads(STATS.read_text())["duration_by_test"]
    items.sort(key=lambda item: duration_by_test.get(item.nodeid, float("inf")))
