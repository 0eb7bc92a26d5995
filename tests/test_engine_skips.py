"""``tests/conftest.py``: with ``KVPOOL_REQUIRE_ENGINES`` set (CI), an engine test skipped
for a missing extra or wheel fails, at run time and at collection; other skips, and every
skip without the variable, stay skips."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text(encoding="utf-8")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_engine="""
import pytest

def test_needs_torch():
    pytest.skip("SGLang's allocator needs torch: pip install -e '.[sglang]'")

def test_opt_in():
    pytest.skip("opt-in: KVPOOL_FULL_VLLM=1 with vLLM installed")
""",
        test_module_level="""
import pytest
pytest.importorskip("no_such_module_kvpool", reason="needs it: pip install -e '.[lmdeploy]'")

def test_never_collected():
    pass
""",
    )
    return pytester


def test_engine_skips_fail_when_engines_are_required(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVPOOL_REQUIRE_ENGINES", "1")
    result = project.runpytest("-p", "no:cacheprovider", "--continue-on-collection-errors")
    result.assert_outcomes(failed=1, skipped=1, errors=1)
    result.stdout.fnmatch_lines(["*KVPOOL_REQUIRE_ENGINES is set*.[[]sglang]*"])


def test_engine_skips_stay_skips_otherwise(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KVPOOL_REQUIRE_ENGINES", raising=False)
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3)
