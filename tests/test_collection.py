"""Every test file of the suite is collected: no installed plugin may drop one.

ai-dynamo 1.6.1 registers pytest plugins for its own tests whose ``pytest_ignore_collect``
drops any file named after an engine that is not installed (``vllm``, ``sglang``, ...):
with it installed, 20 of our test files went unrun without a word. pyproject's addopts
blocks those plugins; these tests fail on any plugin left that implements
``pytest_ignore_collect``, and on a test file of ours that a plugin would not collect."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: The plugins allowed to decide that a path is not collected: pytest's own, and
#: Hypothesis's (it keeps pytest out of its ``.hypothesis`` example database).
OWN = frozenset({"main", "hypothesispytest"})


def ignoring_plugins(manager: pytest.PytestPluginManager) -> list[str]:
    """The registered plugins, other than pytest's own, that can drop a path."""
    return sorted(
        name
        for name, plugin in manager.list_name_plugin()
        if plugin is not None and hasattr(plugin, "pytest_ignore_collect") and name not in OWN
    )


def test_no_plugin_drops_a_test_file(pytestconfig: pytest.Config) -> None:
    assert ignoring_plugins(pytestconfig.pluginmanager) == []


def test_a_plugin_that_drops_files_is_named(pytestconfig: pytest.Config) -> None:
    class Dropper:
        def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
            return "vllm" in collection_path.name or None

    manager = pytestconfig.pluginmanager
    manager.register(Dropper(), name="planted_dropper")
    try:
        assert ignoring_plugins(manager) == ["planted_dropper"]
    finally:
        manager.unregister(name="planted_dropper")


def dropped(config: pytest.Config) -> list[str]:
    """Our test files some plugin would not collect (its ``pytest_ignore_collect`` says so)."""
    return sorted(
        path.relative_to(HERE).as_posix()
        for path in HERE.rglob("test_*.py")
        if config.hook.pytest_ignore_collect(collection_path=path, config=config)
    )


def test_no_test_file_of_ours_is_dropped(pytestconfig: pytest.Config) -> None:
    assert dropped(pytestconfig) == []


def test_a_dropped_file_is_named(pytestconfig: pytest.Config) -> None:
    class Dropper:
        def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
            return collection_path.name == "test_vllm_release.py" or None

    manager = pytestconfig.pluginmanager
    manager.register(Dropper(), name="planted_dropper")
    try:
        assert dropped(pytestconfig) == ["conformance/test_vllm_release.py"]
    finally:
        manager.unregister(name="planted_dropper")
