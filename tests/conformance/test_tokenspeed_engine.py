"""TokenSpeed 0.1.42 at the engine machine: its C++ scheduler plans every batch, the suite
plays the clients and the model; it passes on seeds 1-3 with its events judged, and the
data path the judgement rests on (its copies, its hits) is shown load-bearing by a driver
that drops the copies, which is caught."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.tokenspeed.entry import ENTRY
from kvpool.conformance.machines.engine.runner import run_engine
from kvpool.conformance.targets.errors import TargetLoadError
from kvpool.conformance.targets.registry import describe_target

pytest.importorskip(
    "tokenspeed_scheduler", reason="pip install -e '.[tokenspeed]' (tokenspeed-scheduler)"
)


def factory() -> Any:
    return ENTRY.load_driver(describe_target("tokenspeed==0.1.42"))[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tokenspeed_passes_with_its_events_judged(seed: int) -> None:
    result = run_engine(
        factory(), max_examples=60, steps=40, seed=seed, max_blocks=10, consumer="count"
    )
    assert result.passed, result.failure
    judged = result.record.properties
    for name in ("own-contents", "append-only", "idle-pool-free", "events-parent-known"):
        assert judged[name] > 0, name
    assert result.record.situations["hit"] > 0 and result.record.situations["copied"] > 0


def test_the_model_skipping_its_copies_is_caught() -> None:
    make = factory()

    def without_copies(setup: Any) -> Any:
        driver = make(setup)
        step = driver.step
        driver.step = lambda: replace(step(), copies=())
        return driver

    result = run_engine(without_copies, max_examples=60, steps=40, seed=1, max_blocks=10)
    assert result.failure is not None
    assert "property 'own-contents' broken" in result.failure.message


def test_another_release_than_the_installed_one_is_a_usage_error() -> None:
    with pytest.raises(TargetLoadError, match=r"0\.1\.42 is installed, not 9\.9\.9"):
        ENTRY.load_driver(describe_target("tokenspeed==9.9.9"))
    result = CliRunner().invoke(main, ["conform", "--target", "tokenspeed==0.1.42"])
    assert result.exit_code == 2 and "--machine engine" in result.output


def test_a_stream_missing_its_stores_is_caught_by_the_consumer_model() -> None:
    make = factory()

    def without_stores(setup: Any) -> Any:
        driver = make(setup)
        drain = driver.drain_events
        driver.drain_events = lambda: [e for e in drain() if type(e).__name__ != "BlockStored"]
        return driver

    result = run_engine(
        without_stores, max_examples=60, steps=40, seed=1, max_blocks=10, consumer="count"
    )
    assert result.failure is not None
    assert "events-removed-known" in result.failure.message


def test_conform_says_what_it_could_not_check_on_tokenspeed() -> None:
    result = CliRunner().invoke(
        main,
        ["conform", "--target", "tokenspeed==0.1.42", "--machine", "engine", "--seed", "1",
         "-n", "20"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "not checked (the engine takes no cache salt)" in result.output
    assert "events-removed-known" in result.output
