"""Every install hint the suite prints works where kvpool-spec is installed from: a clone
of its repository (it is not on the package index). Hints for an extra come from one
helper, ``kvpool.conformance.install.extra_hint``, and name only extras ``pyproject.toml``
declares; no file names ``kvpool-spec[X]``, which would send a user to the index."""

from __future__ import annotations

import importlib.util
import re
import shlex
import tomllib
from pathlib import Path

import pytest
from kvpool.conformance.install import EXTRAS, extra_hint

ROOT = Path(__file__).resolve().parents[1]
#: A hint naming the package on the index with an extra: ``pip install 'kvpool-spec[fuzz]'``.
INDEX_HINT = re.compile(r"pip install[^\n]*kvpool-spec\[")
#: Where hints are written: the code, the tests' skip reasons, the docs and the README.
SEARCHED = ("conformance", "spec", "impl", "tests", "docs", ".ci", "README.md")


def declared_extras() -> set[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(data["project"]["optional-dependencies"])


def index_hints(text: str) -> list[str]:
    """The lines of ``text`` that tell a user to install kvpool-spec's extra from the index."""
    return [line.strip() for line in text.splitlines() if INDEX_HINT.search(line)]


def test_the_helper_knows_exactly_the_declared_extras() -> None:
    assert declared_extras() == EXTRAS


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_hint_installs_the_extra_from_the_clone(extra: str) -> None:
    command, _, where = extra_hint(extra).partition(" (")
    assert shlex.split(command) == ["pip", "install", "-e", f".[{extra}]"]
    assert "clone" in where


def test_a_misspelt_extra_fails_where_it_is_written() -> None:
    with pytest.raises(ValueError, match="no extra 'fuzzz'"):
        extra_hint("fuzzz")


def test_the_engines_install_lines_come_from_the_helper() -> None:
    from kvpool.conformance.engines.lmdeploy.release import INSTALL_LINE as LMDEPLOY
    from kvpool.conformance.engines.nanovllm.release import INSTALL_LINE as NANOVLLM
    from kvpool.conformance.engines.sglang.loader import INSTALL_LINE as SGLANG
    from kvpool.conformance.tools.fuzz.database import FUZZ_EXTRA

    assert extra_hint("fuzz") == FUZZ_EXTRA
    assert extra_hint("lmdeploy") == LMDEPLOY
    assert extra_hint("nanovllm") == NANOVLLM
    assert extra_hint("sglang") == SGLANG


def test_a_missing_engine_skip_still_fails_in_ci() -> None:
    """tests/conftest.py turns an engine's skip into a failure in CI by its install line."""
    spec = importlib.util.spec_from_file_location("tests_conftest", ROOT / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert any(marker in extra_hint("sglang") for marker in conftest.MISSING_ENGINE)


def test_no_file_sends_a_user_to_the_index_for_an_extra() -> None:
    found = []
    for name in SEARCHED:
        base = ROOT / name
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in files:
            if path.suffix not in (".py", ".md", ".yml", ".toml", "") or not path.is_file():
                continue
            if path == Path(__file__):  # it quotes the wrong hint to plant it
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(ROOT)}: {line}" for line in index_hints(text)]
    assert found == []


def test_a_planted_index_hint_is_caught() -> None:
    planted = "raise Missing(\"needs redis: pip install 'kvpool-spec[fuzz]'\")\n"
    assert index_hints(planted) == [planted.strip()]
    assert index_hints(f"needs redis: {extra_hint('fuzz')}\n") == []
