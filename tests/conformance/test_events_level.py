"""The events level: each planted stream fault is caught as the property it breaks, on
several seeds; our pool passes against the count consumer and shows the duplicate-copy
removal to a set consumer; a finding is traced, replayed and shown like any other."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from faulty_event_pools import BREAKS  # pytest puts this folder on sys.path
from kvpool.conformance.cli import main
from kvpool.conformance.machines.pool.levels import level_for
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.targets.loading import load_target
from kvpool.conformance.trace.files import TraceFileError, dumps, parse_trace, read_trace
from kvpool.spec import SEED

SEEDS = (1, 2, 3)


def events_run(target: str, consumer: str, seed: int, max_examples: int = 150) -> list[str]:
    factory, _ = load_target(target)
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


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fault", sorted(BREAKS))
def test_a_planted_stream_fault_is_caught(fault: str, seed: int) -> None:
    found = events_run(f"faulty_event_pools:{fault}", "count", seed)
    assert found, f"{fault} passed the events level on seed {seed}"
    assert signature(found[0]) in {f"property {name}" for name in BREAKS[fault]}, found[0]
    assert "for the count consumer" in found[0]


def test_our_pool_keeps_the_count_contract() -> None:
    assert events_run("impl", "count", seed=1, max_examples=40) == []


@pytest.mark.parametrize("seed", SEEDS)
def test_our_pool_loses_a_set_consumer_on_duplicate_copies(seed: int) -> None:
    """Our pool stores and removes every copy (the count contract): a set consumer drops a
    hash when one of its copies goes (upstream 55092's report), or is told to remove one
    it already dropped."""
    found = events_run("impl", "set", seed)
    assert found, f"the set consumer passed on seed {seed}"
    assert signature(found[0]) in (
        "property events-replay-index",
        "property events-removed-known",
    ), found[0]
    assert "for the set consumer" in found[0]


def test_a_finding_is_traced_replayed_and_shown(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "conform",
            "--target",
            "faulty_event_pools:RemovesTwice",
            "--machine",
            "pool",
            "--level",
            "events",
            "--seed",
            "1",
            "--max-findings",
            "1",
            "--no-coverage",
            "--trace-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1, result.output
    assert "Nonconformance: pool/events (count)" in result.output
    assert "--level events --consumer count" in result.output
    (path,) = tmp_path.glob("*-events-count-*.itf.json")
    trace = read_trace(path)
    assert (trace.meta.level, trace.meta.consumer) == ("events", "count")
    assert signature(trace.meta.message) == "property events-removed-known"
    target = ["--target", "faulty_event_pools:RemovesTwice"]
    replayed = runner.invoke(main, ["replay", str(path), *target])
    assert replayed.exit_code == 1, replayed.output
    assert "events-removed-known" in replayed.output
    shown = runner.invoke(main, ["show", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "pool/events (count consumer)" in shown.output


def test_an_events_trace_names_its_consumer(tmp_path: Path) -> None:
    import json

    runner = CliRunner()
    target = ["--target", "faulty_event_pools:ForgetsRemoval", "--machine", "pool"]
    options = ["--level", "events", "--seed", "2", "--max-findings", "1", "--no-coverage"]
    runner.invoke(main, ["conform", *target, *options, "--trace-dir", str(tmp_path)])
    (path,) = tmp_path.glob("*.itf.json")
    document = json.loads(dumps(read_trace(path)))
    del document["#meta"]["kvpool"]["consumer"]
    with pytest.raises(TraceFileError, match="names its consumer model"):
        parse_trace(document)


def test_a_pool_without_events_is_told_so() -> None:
    result = CliRunner().invoke(
        main, ["conform", "--target", "vllm-mlx", "--level", "events", "--no-coverage"]
    )
    assert result.exit_code == 2, result.output
    assert "publishes no KV events" in result.output


@pytest.mark.parametrize("seed", SEEDS)
def test_the_request_machine_judges_the_managers_pool_calls(seed: int) -> None:
    """The spec's manager drives the pool; its pool calls' events go to the consumer."""
    from kvpool.conformance.machines.requests.runner import (
        events_on_pool,
        pool_builder,
        run_requests,
    )

    factory, _ = load_target("faulty_event_pools:NamesUnknownParent")
    result = run_requests(
        pool_builder(factory, SEED, "count"),
        events_on_pool("count"),
        max_examples=30,
        steps=20,
        seed=seed,
        max_blocks=12,
        shrink_seconds=2.0,
    )
    assert result.label == "requests/pool (count)"
    assert result.failures, f"the unknown parent passed the request machine on seed {seed}"
    assert signature(result.failures[0].message) == "property events-parent-known"


def test_caching_calls_are_drawn_as_a_manager_makes_them() -> None:
    """The events level's caller: the block before the new ones cached under the request's
    hash, a request's blocks distinct; anything else is left undrawn."""
    from kvpool.conformance.machines.events.caller import manager_could_call
    from kvpool.spec import (
        CacheFullBlocks,
        CachePartialBlock,
        FreeBlocks,
        GetNewBlocks,
        PoolConfig,
        initial_state,
        step,
    )
    from kvpool.spec.hashing import request_block_hashes

    hashes = request_block_hashes([1, 2, 3, 4], 1)
    state, _ = step(initial_state(PoolConfig(num_gpu_blocks=6)), GetNewBlocks(4))
    after_uncached = CacheFullBlocks(hashes, (1, 2), 1, 2, 1)
    assert not manager_could_call(state, after_uncached)  # block 1 was never cached
    assert manager_could_call(state, CacheFullBlocks(hashes, (1,), 0, 1, 1))
    state, _ = step(state, CacheFullBlocks(hashes, (1,), 0, 1, 1))
    assert manager_could_call(state, after_uncached)
    assert not manager_could_call(state, CacheFullBlocks(hashes, (1, 1), 1, 2, 1))
    assert not manager_could_call(state, FreeBlocks((2, 2)))
    assert manager_could_call(state, FreeBlocks((2, 3)))
    # a partial entry in block 1 needs block 0 cached, by another block than the entry's
    assert manager_could_call(state, CachePartialBlock(hashes, 2, 2, 0, 1))
    assert not manager_could_call(state, CachePartialBlock(hashes, 1, 2, 0, 1))
    assert not manager_could_call(state, CachePartialBlock(hashes, 2, 2, 1, 1))  # group 1
