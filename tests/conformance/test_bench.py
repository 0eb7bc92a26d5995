"""kvpool bench: the verification pass, the JSON report, deterministic workloads (no timing
assertions)."""

from __future__ import annotations

import json
import time
from typing import Any

import click
import pytest
from click.testing import CliRunner
from kvpool.conformance.tools.bench import command, measure, programs
from kvpool.conformance.tools.bench.measure import Contender
from kvpool.impl import BlockPool


class ReversingPool(BlockPool):
    """Hands out the right blocks in the wrong order."""

    def get_new_blocks(self, num_blocks: int) -> list[Any]:
        return super().get_new_blocks(num_blocks)[::-1]


def reversing() -> Contender:
    base = measure.ours()
    return Contender(
        "reversing",
        lambda n, hbs: ReversingPool(n, True, hash_block_size=hbs),
        base.make_request,
    )


def test_verification_catches_a_pool_returning_other_blocks() -> None:
    prog = programs.build("churn", 64, 200)
    found = measure.verify(prog, [measure.ours(), reversing()])
    assert found is not None
    assert found.call.startswith("get_new_blocks") and found.phase == "timed"
    assert found.results["ours"] != found.results["reversing"]


def test_verification_passes_identical_pools() -> None:
    for workload in programs.WORKLOADS:
        prog = programs.build(workload, 200, 300)
        assert measure.verify(prog, [measure.ours(), measure.ours()]) is None


def test_workloads_are_deterministic() -> None:
    for workload in programs.WORKLOADS:
        a = programs.build(workload, 300, 400, seed=3)
        b = programs.build(workload, 300, 400, seed=3)
        assert a.fingerprint() == b.fingerprint()
        assert len(a.timed) >= 400
    assert (
        programs.build("churn", 300, 400, 1).fingerprint()
        != programs.build("churn", 300, 400, 2).fingerprint()
    )


def _run(monkeypatch: Any, other: Contender, *args: str) -> Any:
    monkeypatch.setattr(command, "vllm", lambda spec: other)
    return CliRunner().invoke(
        command.bench,
        ["--sizes", "100,200", "--ops", "100", "--repeat", "1", "--json", *args],
    )


def test_json_report_structure(monkeypatch: Any) -> None:
    stand_in = Contender("stand-in", measure.ours().make_pool, measure.ours().make_request)
    result = _run(monkeypatch, stand_in)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["schema"] == "kvpool-bench/1"
    assert report["verified"] is True and report["disagreements"] == []
    assert report["sizes"] == [100, 200]
    assert set(report["aims"]) == {
        "throughput_ratio_at_least_2",
        "ours_growth_at_most_1_25",
        "memory_per_block_not_worse",
    }
    assert len(report["results"]) == len(programs.WORKLOADS) * 2
    for row in report["results"]:
        assert set(row) == {
            "workload",
            "num_gpu_blocks",
            "calls",
            "ours_ops_per_s",
            "vllm_ops_per_s",
            "ratio",
            "ours_seconds",
            "vllm_seconds",
            "floor_seconds",
        }
        assert row["ours_ops_per_s"] > 0 and row["vllm_ops_per_s"] > 0
        # Only prefix-hit times the lookup floor, once per repetition.
        assert len(row["floor_seconds"]) == (row["workload"] == command.FLOOR_WORKLOAD)
    assert set(report["growth"]) == set(programs.WORKLOADS)
    for workload, growth in report["growth"].items():
        floored = {"floor_added_us", "least_growth_at_ours_speed"} <= set(growth)
        assert floored == (workload == command.FLOOR_WORKLOAD)
        assert {"ours_added_us", "vllm_added_us"} <= set(growth)
    assert [m["num_gpu_blocks"] for m in report["memory"]] == [100, 200]


def test_compiled_build_is_verified_and_timed_beside_ours(monkeypatch: Any) -> None:
    from kvpool.conformance.tools.bench import compiled

    try:
        compiled.build()
    except compiled.CompiledBuildUnavailable as exc:
        pytest.skip(f"no compiled build here: {exc}")
    stand_in = Contender("stand-in", measure.ours().make_pool, measure.ours().make_request)
    result = _run(monkeypatch, stand_in, "--compiled", "-w", "churn", "-w", "requests")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pools"]["compiled"] == measure.compiled_contender().name
    assert "compiled_throughput_ratio_at_least_2" in report["aims"]
    for row in report["results"]:
        assert row["compiled_ops_per_s"] > 0 and len(row["compiled_seconds"]) == 1
    assert all(m["compiled_bytes_per_block"] > 0 for m in report["memory"])


def test_a_compiled_build_that_hands_out_other_blocks_is_refused(monkeypatch: Any) -> None:
    # The compiled build goes through the verification pass like any pool.
    monkeypatch.setattr(command, "compiled_contender", reversing)
    stand_in = Contender("stand-in", measure.ours().make_pool, measure.ours().make_request)
    result = _run(monkeypatch, stand_in, "--compiled", "-w", "churn", "--no-memory")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["verified"] is False
    assert any("reversing" in d for d in report["disagreements"])


def test_disagreeing_pools_exit_1(monkeypatch: Any) -> None:
    result = _run(monkeypatch, reversing(), "-w", "churn", "--no-memory")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["verified"] is False and report["disagreements"]


def test_each_lookup_brings_its_own_hash_object() -> None:
    prog = programs.build("prefix-hit", 200, 100)
    ours = measure.ours()
    pool = ours.make_pool(prog.num_gpu_blocks, prog.hash_block_size)
    requests = [ours.make_request(list(h)) for h in prog.requests]
    lookups = [
        (call, compiled)
        for call, compiled in zip(
            prog.timed, measure.compile_calls(pool, prog.timed, requests), strict=True
        )
        if call[0] == "get_cached_block"
    ]
    assert lookups
    for call, (_fn, args) in lookups:
        assert args[0] == call[1] and args[0] is not call[1]


class SleepyPool(BlockPool):
    """Waits 20 ms in every allocation: time a CPU clock must not count."""

    def get_new_blocks(self, num_blocks: int) -> list[Any]:
        time.sleep(0.02)
        return super().get_new_blocks(num_blocks)


def test_timing_counts_the_pools_cpu_time_not_waiting() -> None:
    prog = programs.build("churn", 64, 100)
    sleepy = Contender(
        "sleepy",
        lambda n, hbs: SleepyPool(n, True, hash_block_size=hbs),
        measure.ours().make_request,
    )
    waits = sum(1 for call in prog.timed if call[0] == "get_new_blocks") * 0.02
    assert waits >= 0.5
    assert measure.time_once(prog, sleepy, []) < waits / 5


def test_the_lookup_floor_looks_up_what_the_pool_looks_up_and_hits_where_it_hits() -> None:
    prog = programs.build("prefix-hit", 300, 500)
    cached, keys = measure.floor_lookups(prog)
    lookups = [c for c in prog.timed if c[0] == "get_cached_block"]
    assert len(keys) == len(lookups) > len(prog.timed) // 2
    assert all(k == c[1] and k is not c[1] for k, c in zip(keys, lookups, strict=True))
    # Every lookup the pool answers from its cache, the floor's dict answers too: the floor
    # does no less than a pool's lookups must (it only skips what a hit does afterwards).
    pool = measure.ours().make_pool(prog.num_gpu_blocks, prog.hash_block_size)
    requests = [measure.ours().make_request(list(h)) for h in prog.requests]
    for fn, args in measure.compile_calls(pool, prog.setup, requests):
        fn(*args)
    hits = 0
    for call, (fn, args) in zip(
        prog.timed, measure.compile_calls(pool, prog.timed, requests), strict=True
    ):
        if fn(*args) is not None and call[0] == "get_cached_block":
            hits += 1
            assert call[1] in cached
    assert hits > len(lookups) // 2
    assert measure.lookup_floor_once(prog) >= 0.0


def test_the_floor_pool_hands_out_what_ours_does_on_its_workloads() -> None:
    from kvpool.conformance.tools.bench import floor

    for workload in floor.FLOOR_WORKLOADS:
        for size in (64, 300):
            prog = programs.build(workload, size, 400, seed=2)
            assert measure.verify(prog, [measure.ours(), floor.floor_contender()]) is None


def test_a_floor_pool_that_forgets_the_lru_order_is_refused() -> None:
    from kvpool.conformance.tools.bench import floor

    class Forgetful(floor.FloorPool):
        """Puts keyed blocks at the front too: the next allocation evicts a hit."""

        def free_blocks(self, ordered_blocks: Any) -> None:
            for blk in ordered_blocks:
                blk.key = None if blk.ref_cnt == 1 else blk.key
            super().free_blocks(ordered_blocks)

    planted = Contender("forgetful", Forgetful, floor.floor_contender().make_request)
    prog = programs.build("prefix-hit", 300, 400)
    found = measure.verify(prog, [measure.ours(), planted])
    assert found is not None and found.call.startswith("get_new_blocks")
    assert found.results["ours"] != found.results["forgetful"]


def test_floor_comparison_reports_every_contender_against_vllms() -> None:
    from kvpool.conformance.tools.bench import floor

    pools = [measure.ours(), measure.ours(), floor.floor_contender()]
    pools[1] = Contender("stand-in", pools[1].make_pool, pools[1].make_request)
    row = floor.compare(pools, "churn", 200, 300, 2, 0)
    assert set(row["us_per_call"]) == set(row["vs_vllm"]) == {"ours", "stand-in", "floor"}
    assert row["vs_vllm"]["stand-in"] == 1.0
    assert all(v > 0 for v in row["us_per_call"].values())


def test_the_lookup_split_times_the_prefix_hit_lookups_apart_from_the_rest() -> None:
    from kvpool.conformance.tools.bench import floor

    pools = [measure.ours(), measure.ours(), floor.floor_contender()]
    pools[1] = Contender("stand-in", pools[1].make_pool, pools[1].make_request)
    row = floor.split_lookups(pools, 200, 300, 2, 0)
    prog = programs.build("prefix-hit", 200, 300)
    lookups = sum(1 for c in prog.timed if c[0] == "get_cached_block")
    assert (row["lookups"], row["other_calls"]) == (lookups, len(prog.timed) - lookups)
    assert 0 < lookups < len(prog.timed)
    names = {"ours", "stand-in", "floor"}
    assert set(row["us_per_lookup"]) == set(row["lookups_vs_vllm"]) == names
    assert set(row["us_per_other_call"]) == set(row["others_vs_vllm"]) == names
    assert row["lookups_vs_vllm"]["stand-in"] == row["others_vs_vllm"]["stand-in"] == 1.0
    assert all(v > 0 for v in row["us_per_lookup"].values())


def test_the_lookup_split_refuses_a_pool_that_misses_a_cached_block() -> None:
    from kvpool.conformance.tools.bench import floor

    class Missing(floor.FloorPool):
        """Answers every lookup with a miss: the lookups alone disagree with ours."""

        def get_cached_block(self, block_hash: bytes, kv_cache_group_ids: Any) -> Any:
            return None

    planted = Contender("missing", Missing, floor.floor_contender().make_request)
    with pytest.raises(click.ClickException, match="pools disagree"):
        floor.split_lookups([measure.ours(), planted], 200, 300, 1, 0)


def test_the_instruction_count_harness_makes_the_timed_calls() -> None:
    from kvpool.conformance.tools.bench import instructions

    prog = programs.build("cache-full", 200, 300)
    made: list[str] = []

    class Counting(BlockPool):
        def cache_full_blocks(self, *args: Any, **kwargs: Any) -> None:
            made.append("cache_full_blocks")
            super().cache_full_blocks(*args, **kwargs)

    counting = Contender(
        "counting", lambda n, hbs: Counting(n, True, hbs), measure.ours().make_request
    )
    instructions.POOLS["counting"] = lambda: counting
    try:
        assert instructions.run_timed_calls("cache-full", 200, "counting", 300, 0) == len(
            prog.timed
        )
    finally:
        del instructions.POOLS["counting"]
    assert len(made) == sum(1 for c in prog.timed if c[0] == "cache_full_blocks")
