"""Routers judged at the events level: a router plugin written from the docs passes on
our pool; each planted router fault is caught as the router property it breaks, shrunk;
the request machine judges a router too; a bad --consumer is a usage error."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.consumers.naming import parse_consumer
from kvpool.conformance.consumers.protocol import Consumer, ConsumerError
from kvpool.conformance.machines.pool.levels import level_for
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.targets.loading import load_target
from kvpool.spec import SEED
from planted_consumers import BREAKS  # pytest puts this folder on sys.path

DOCS_WRITTEN = "docs_written_consumer:make_router"


def router_run(consumer: str, seed: int, max_examples: int = 120) -> list[str]:
    parse_consumer(consumer)
    factory, _ = load_target("impl")
    result = run_level(
        factory,
        SEED,
        level_for("events", consumer),
        max_examples=max_examples,
        steps=40,
        seed=seed,
        max_blocks=8,
        shrink_seconds=2.0,
    )
    return [f.message for f in result.failures]


def test_the_docs_written_router_is_a_consumer_and_passes() -> None:
    from docs_written_consumer import make_router

    assert isinstance(make_router(), Consumer)
    assert router_run(DOCS_WRITTEN, seed=1) == []


@pytest.mark.parametrize("seed", (1, 2))
@pytest.mark.parametrize("fault", sorted(BREAKS))
def test_a_planted_router_fault_is_caught(fault: str, seed: int) -> None:
    found = router_run(f"planted_consumers:{fault}", seed)
    assert found, f"{fault} passed the events level on seed {seed}"
    assert signature(found[0]) == f"property {BREAKS[fault]}", found[0]
    assert "for the counting-router consumer" in found[0]


def test_a_consumer_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConsumerError, match="lacks held_blocks, residency"):
        parse_consumer("planted_consumers:not_a_consumer")
    with pytest.raises(ConsumerError, match="unknown consumer 'bag'"):
        parse_consumer("bag")
    with pytest.raises(ConsumerError, match="could not be loaded"):
        parse_consumer("no_such_module_here:make")


def test_an_unknown_consumer_is_a_usage_error() -> None:
    result = CliRunner().invoke(
        main, ["conform", "--level", "events", "--machine", "pool", "--consumer", "bag"]
    )
    assert result.exit_code == 2, result.output
    assert "unknown consumer 'bag'" in result.output


def test_the_request_machine_judges_a_router() -> None:
    """The spec's manager on our pool, its pool calls judged by a router that forgets
    copies: twin requests cache one prefix twice, and freeing one loses it."""
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--level",
            "events",
            "--machine",
            "requests",
            "--consumer",
            "planted_consumers:ForgetsCopies",
            "--seed",
            "1",
            "--max-examples",
            "120",
            "--max-findings",
            "1",
            "--no-coverage",
        ],
    )
    assert result.exit_code == 1, result.output
    assert "property 'router-recall' broken for the counting-router consumer" in result.output


def test_a_plugin_routers_trace_replays_only_when_the_plugin_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plugin = "planted_consumers:ForgetsCopies"
    runner = CliRunner()
    found = runner.invoke(
        main,
        ["conform", "--level", "events", "--machine", "pool", "--consumer", plugin,
         "--seed", "1", "--max-findings", "1", "--no-coverage", "--trace-dir", str(tmp_path)],
    )  # fmt: skip
    assert found.exit_code == 1, found.output
    (trace,) = tmp_path.glob("*.itf.json")
    assert ":" not in trace.name
    from kvpool.conformance.consumers import naming

    naming._plugins.clear()  # a fresh process: nothing named on its command line yet
    refused = runner.invoke(main, ["replay", str(trace)])
    assert refused.exit_code == 2
    assert f"--consumer {plugin}" in refused.output  # the command that replays it
    replayed = runner.invoke(main, ["replay", str(trace), "--consumer", plugin])
    assert replayed.exit_code == 1, replayed.output
    assert "property 'router-recall' broken for the counting-router consumer" in replayed.output
