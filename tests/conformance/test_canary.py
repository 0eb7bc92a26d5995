"""The canary: the newest vLLM and SGLang releases on the package index at the time the
tests run, each given the short conform of ``kvpool targets --latest`` (every level the
engine supports, small sizes). A newest release the suite refuses fails here with the
reason, the day it ships. The wheels are cached (``~/.cache/kvpool``) between runs.

A failed download or an unreachable index fails too, with pip's message: nothing is
skipped silently.
"""

from __future__ import annotations

import pytest
from kvpool.conformance.targets.registry import engine
from kvpool.conformance.targets.releases.index import IndexAnswerError, newest_release
from kvpool.conformance.targets.releases.latest import run_release


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_the_newest_release_runs(name: str) -> None:
    entry = engine(name)
    assert entry.project is not None
    try:
        newest = newest_release(entry.project)
    except IndexAnswerError as exc:
        pytest.fail(f"the package index gave no newest {name}: {exc}", pytrace=False)
    support = entry.support(newest)
    assert support.supported is not False, f"{name} {newest} is refused: {support.missing}"
    outcome = run_release(entry, entry.release_form(newest), lambda text: None)
    assert outcome.ran, f"{name} {newest} is refused: {outcome.reason}"
    assert outcome.status in ("pass", "findings")
