"""``kvpool diff``: two pools in lockstep against each other, no spec in the loop.

The spec target run under two profiles stands in for two releases (it behaves exactly as
each profile says), so these tests need no download; ``test_diff_releases`` runs the real
release pairs.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.engines.builtin.spec_target import SpecTarget
from kvpool.conformance.machines.pool.levels import ORDER, SAFETY, Level
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.tools.diff.command import diff
from kvpool.conformance.tools.diff.common import label
from kvpool.conformance.tools.diff.loading import load_pair
from kvpool.conformance.tools.diff.pair import Difference, PairRun, replay
from kvpool.conformance.tools.diff.renaming import Renaming
from kvpool.conformance.tools.diff.run import DiffResult, run_diff
from kvpool.conformance.trace.files import TraceFileError, dumps, parse_trace, read_trace
from kvpool.conformance.trace.model import Trace, TraceMeta
from kvpool.conformance.trace.replay import replay_file
from kvpool.spec import (
    NULL_BLOCK,
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    Observation,
    PoolConfig,
    Profile,
    Touch,
    adopt_allocation,
    initial_state,
    step,
)
from kvpool.spec.hashing import request_block_hashes

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


def kvpool_diff(*args: str) -> Result:
    return CliRunner().invoke(diff, list(args))


def quick(a: str, b: str, level: Level, profile_a: str | None = None, **kw: Any) -> DiffResult:
    pair = load_pair(a, b, profile_a, kw.pop("profile_b", None))
    settings: dict[str, Any] = {
        "max_examples": 80,
        "steps": 25,
        "seed": 3,
        "max_blocks": 6,
        "max_findings": 3,
        "shrink_seconds": 5.0,
    }
    settings.update(kw)
    return run_diff(pair, level, **settings)


class HandsOutTheBack(SpecTarget):
    """The spec, but a pool that hands out the free queue's *last* blocks: every choice it
    makes is allowed at safety, never the profile's order."""

    name = "back-first"

    def apply(self, action: Action) -> Observation:
        if isinstance(action, GetNewBlocks) and action.num_blocks > 0:
            back = tuple(reversed(self.state.free_queue))[: action.num_blocks]
            self.state = adopt_allocation(self.state, back)
        self.state, observation = step(self.state, action)
        return observation


class ForgetsKeysOnFree(SpecTarget):
    """The spec, but freeing a cached block drops its key (a lost prefix-cache entry)."""

    name = "forgets-keys"

    def apply(self, action: Action) -> Observation:
        observation = super().apply(action)
        if isinstance(action, FreeBlocks) and self.state.config.enable_caching:
            dropped = tuple(b for b in set(action.blocks) if b and self.state.ref_cnt[b] == 0)
            self.state, _ = step(self.state, EvictBlocks(dropped))
        return observation


class RefusesToTouchNull(SpecTarget):
    """The spec, but ``touch`` refuses the null block (which the contract allows)."""

    name = "no-null-touch"

    def apply(self, action: Action) -> Observation:
        if isinstance(action, Touch) and NULL_BLOCK in action.blocks:
            raise ValueError("touch: the null block cannot be touched")
        return super().apply(action)


def back_first(config: PoolConfig, profile: Profile) -> SpecTarget:
    return HandsOutTheBack(config, profile)


def forgets_keys(config: PoolConfig, profile: Profile) -> SpecTarget:
    return ForgetsKeysOnFree(config, profile)


def no_null_touch(config: PoolConfig, profile: Profile) -> SpecTarget:
    return RefusesToTouchNull(config, profile)


# --- identical pools ---------------------------------------------------------------------


@pytest.mark.parametrize("level", [ORDER, SAFETY])
def test_two_copies_of_one_pool_show_no_difference(level: Level) -> None:
    result = quick("impl", "impl", level, max_examples=60)
    assert result.differences == ()
    assert result.record.examples >= 60 and result.record.steps > 500
    assert result.parted == 0  # identical pools never make different choices


def test_the_command_says_so_and_exits_0() -> None:
    result = kvpool_diff("spec", "spec", "-n", "20", "--seed", "1")
    assert result.exit_code == 0, result.output
    assert "no difference" in result.output
    assert "left out: none" in result.output


# --- planted differences -------------------------------------------------------------------


def test_a_planted_fault_against_impl_is_a_short_trace() -> None:
    """Cached blocks freed to the front (LRU lost) against the real pool: order sees it."""
    result = quick("faulty_pools:CachedToFront", "impl", ORDER)
    assert result.differences, "the planted fault went unseen"
    first = result.differences[0]
    assert "free queue order" in first.message
    assert 1 <= len(first.trace) <= 4, first.trace
    assert any(isinstance(a, CacheFullBlocks | CachePartialBlock) for a in first.trace)
    again, ran = replay(result.pair, ORDER, first.config, first.trace)
    assert again == first.message and len(ran) == len(first.trace)


@pytest.mark.parametrize("fault", ["TouchForgetsQueue", "StaleKeyAfterReuse", "WatcherNeverFires"])
def test_safety_faults_are_differences_at_safety(fault: str) -> None:
    result = quick(f"faulty_pools:{fault}", "impl", SAFETY, max_examples=150, max_findings=1)
    assert result.differences, f"{fault} went unseen"
    assert len(result.differences[0].trace) <= 6, result.differences[0].trace


def test_a_lost_key_is_a_difference_at_both_levels() -> None:
    for level in (ORDER, SAFETY):
        result = quick("spec", "test_diff:forgets_keys", level, max_findings=1)
        assert result.differences, level.name
        (lost,) = result.differences
        assert "after free_blocks: keys of block" in lost.message, lost.message
        assert len(lost.trace) <= 4 and isinstance(lost.trace[-1], FreeBlocks)


# --- safety: a renaming of interchangeable blocks ----------------------------------------


def test_safety_renames_interchangeable_blocks_and_order_does_not() -> None:
    pair = load_pair("spec", "test_diff:back_first")
    config = PoolConfig(5, enable_caching=False)
    actions = [GetNewBlocks(2), FreeBlocks((1,)), GetNewBlocks(1), FreeBlocks((2, 1))]
    assert replay(pair, SAFETY, config, actions) == (None, actions)
    problem, ran = replay(pair, ORDER, config, actions)
    assert problem == "get_new_blocks: results differ: A blocks [1, 2], B blocks [4, 3]"
    assert ran == actions[:1]


def test_safety_parts_where_a_cached_block_is_sacrificed_for_an_unkeyed_one() -> None:
    pair = load_pair("spec", "test_diff:back_first")
    hashes = request_block_hashes([1], 1)
    run = PairRun(pair, SAFETY, PoolConfig(3))
    run.apply(GetNewBlocks(1))  # A: block 1, B: block 2 (renamed)
    run.apply(CacheFullBlocks(hashes, (1,), 0, 1, 1, 0))
    run.apply(FreeBlocks((1,)))  # the cached block goes to the back in both
    assert run.parted is None
    run.apply(GetNewBlocks(1))  # A takes the unkeyed front block, B the cached back one
    assert run.parted is not None and "a different eviction choice" in run.parted
    assert "cached block" in run.parted and "unkeyed block" in run.parted
    assert run.record.situations["parted at an eviction choice"] == 1
    run.apply(GetCachedBlock(hashes[0], (0,)))  # nothing more is compared
    assert run.record.steps == 4


def test_a_block_handed_out_that_is_not_free_is_a_difference() -> None:
    renaming = Renaming(4, fixed=False)
    state = initial_state(PoolConfig(4), Profile("p", ""))
    state, _ = step(adopt_allocation(state, (1,)), GetNewBlocks(1))
    # A hands out block 2 (free), B hands out its block 1 (held): no renaming, no parting
    assert renaming.match(state, (2,), (1,)) is None
    assert renaming.identity


def test_one_side_refusing_is_a_difference() -> None:
    pair = load_pair("spec", "test_diff:no_null_touch")
    run = PairRun(pair, ORDER, PoolConfig(3))
    run.apply(GetNewBlocks(1))
    run.apply(Touch((1,)))
    with pytest.raises(Difference) as refused:
        run.apply(Touch((NULL_BLOCK, 1)))
    assert str(refused.value) == (
        "touch: refused by B only (A accepted it): "
        "ValueError: touch: the null block cannot be touched"
    )
    assert signature(str(refused.value)) == "touch: refused by B only (A accepted it)"


# --- what is drawn and what is left out ----------------------------------------------------


def test_left_out_actions_are_named_with_the_side_that_lacks_them() -> None:
    pair = load_pair("spec", "tiny_pool:TinyPool", shared_only=True)
    assert pair.common.one_sided == ()
    left = dict(pair.common.left_out)
    assert left["cache_full_blocks"] == "B (tiny_pool:TinyPool) lacks it"
    assert left["free_blocks(evict_first)"] == "B (tiny_pool:TinyPool) lacks it"
    assert "get_new_blocks" not in left and "touch" not in left
    assert set(pair.common.drawn()) == {
        "get_new_blocks",
        "free_blocks",
        "touch",
        "get_cached_block",
        "get_num_free_blocks",
    }
    by_profile = load_pair("spec", "spec", "seed", "vllm-0.24")
    assert dict(by_profile.common.left_out)["unpin_blocks"] == (
        "B's profile vllm-0.24 leaves it out"
    )
    result = kvpool_diff("tiny_pool:TinyPool", "spec", "-n", "15", "--seed", "2", "--shared-only")
    assert result.exit_code == 0, result.output
    assert "cache_full_blocks (A (tiny_pool:TinyPool) lacks it)" in result.output
    assert "not compared: free_queue (A (tiny_pool:TinyPool) does not show it)" in result.output


def test_an_action_only_one_pool_takes_is_drawn_and_is_a_difference() -> None:
    pair = load_pair("spec", "tiny_pool:TinyPool")
    one_sided = {op: (side, why) for op, side, why in pair.common.one_sided}
    assert one_sided["cache_full_blocks"] == ("A", "B (tiny_pool:TinyPool) lacks it")
    assert one_sided["free_blocks:evict_first"] == ("A", "B (tiny_pool:TinyPool) lacks it")
    assert pair.common.left_out == ()  # what a profile leaves out is still left out
    found = run_diff(
        pair,
        ORDER,
        max_examples=40,
        steps=20,
        seed=1,
        max_blocks=6,
        max_findings=len(one_sided) + 1,
        findings_seconds=120.0,
    ).differences
    kinds = {d.message: d.trace for d in found}
    for op in one_sided:  # each drawn, each a difference of its own, each shrunk
        message = f"{label(op)}: taken by A only; B's pool lacks it"
        assert message in kinds, (message, list(kinds))
        assert len(kinds[message]) <= 2, kinds[message]
    taken = kinds["cache_full_blocks: taken by A only; B's pool lacks it"]
    assert isinstance(taken[-1], CacheFullBlocks)  # after the block its contract needs
    flag = kinds["free_blocks(evict_first): taken by A only; B's pool lacks it"]
    assert isinstance(flag[-1], FreeBlocks) and flag[-1].evict_first
    result = kvpool_diff("tiny_pool:TinyPool", "spec", "-n", "15", "--seed", "2")
    assert result.exit_code == 1, result.output
    assert "taken by one side only, a difference when taken:" in result.output
    assert "taken by B only; A's pool lacks it" in result.output


# --- the command, its traces ---------------------------------------------------------------


@pytest.fixture(scope="module")
def caching_off_diff(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    """The spec under vLLM 0.26's profile against 0.27's: caching-off frees differ."""
    out = tmp_path_factory.mktemp("diff")
    result = CliRunner().invoke(
        diff,
        [
            "spec",
            "spec",
            "--profile-a",
            "vllm-0.26",
            "--profile-b",
            "vllm-0.27",
            "-n",
            "60",
            "--seed",
            "5",
            "--trace-dir",
            str(out),
        ],
    )
    return result, out


def test_differences_are_printed_side_by_side_and_exit_1(
    caching_off_diff: tuple[Result, Path],
) -> None:
    result, out = caching_off_diff
    assert result.exit_code == 1, result.output
    text = result.output
    assert "A spec, profile vllm-0.26" in text and "B spec, profile vllm-0.27" in text
    assert "1 difference(s) between A and B" in text
    assert "after free_blocks: free queue order" in text
    assert "enable_caching=False" in text
    assert "Reproduce with: kvpool diff spec spec --level order" in text
    (trace_file,) = out.glob("*.itf.json")
    assert trace_file.name.startswith("spec-vs-spec-order-5-1")
    assert (out / f"test_{trace_file.name.removesuffix('.itf.json').replace('-', '_')}.py").exists()


def test_the_written_trace_replays_and_shows(caching_off_diff: tuple[Result, Path]) -> None:
    _, out = caching_off_diff
    (trace_file,) = out.glob("*.itf.json")
    trace = read_trace(trace_file)
    assert trace.meta.versus == "spec" and trace.meta.versus_profile == "vllm-0.27"
    assert len(trace.actions) == 2  # get a block, free it: front or back
    verdict = replay_file(trace_file)
    assert not verdict.conforms and verdict.step == 2
    assert "free queue order" in (verdict.message or "")
    runner = CliRunner()
    replayed = runner.invoke(main, ["replay", str(trace_file)])
    assert replayed.exit_code == 1, replayed.output
    shown = runner.invoke(main, ["show", str(trace_file)])
    assert shown.exit_code == 0, shown.output
    assert "diff: A spec (profile vllm-0.26) against B spec (profile vllm-0.27)" in shown.output
    markdown = runner.invoke(main, ["show", "--format", "markdown", str(trace_file)])
    assert "| # | action | free queue | ref counts | keys | A | B | verdict |" in markdown.output


def test_a_diff_trace_whose_pools_now_agree_replays_clean(
    caching_off_diff: tuple[Result, Path], tmp_path: Path
) -> None:
    _, out = caching_off_diff
    (trace_file,) = out.glob("*.itf.json")
    data = json.loads(trace_file.read_text())
    data["#meta"]["kvpool"]["versus_profile"] = "vllm-0.26"
    agreeing = tmp_path / "agree.itf.json"
    agreeing.write_text(json.dumps(data))
    verdict = replay_file(agreeing)
    assert verdict.conforms and verdict.describe() == "pools A and B agree on all 2 actions"


def test_other_traces_keep_their_bytes_and_diff_traces_round_trip() -> None:
    meta = TraceMeta("impl", "seed", "pool", "order", PoolConfig(3), seed=1)
    plain = dumps(Trace(meta, (GetNewBlocks(1),)))
    assert "versus" not in plain
    both = TraceMeta(
        "vllm==0.23.0",
        "vllm-0.23",
        "pool",
        "order",
        PoolConfig(3),
        versus="vllm==0.24.0",
        versus_profile="vllm-0.24",
        versus_version="0.24.0",
    )
    again = parse_trace(json.loads(dumps(Trace(both, (GetNewBlocks(1),)))))
    assert again.meta == both
    robust = json.loads(dumps(Trace(replace(both, level="robustness"), (GetNewBlocks(1),))))
    with pytest.raises(TraceFileError, match="a diff trace runs the pool machine at safety or"):
        parse_trace(robust, "robust.itf.json")


def test_usage_errors_exit_2() -> None:
    unknown = kvpool_diff("spec", "nonsense")
    assert unknown.exit_code == 2 and "unknown target 'nonsense'" in unknown.output
    profile = kvpool_diff("spec", "spec", "--profile-b", "vllm-9")
    assert profile.exit_code == 2 and "unknown profile 'vllm-9'" in profile.output
    level = kvpool_diff("spec", "spec", "--level", "robustness")
    assert level.exit_code == 2


def test_help_teaches_with_the_release_examples() -> None:
    text = kvpool_diff("--help").output
    for example in (
        "kvpool diff vllm==0.33.0 vllm@./vllm",
        "kvpool diff vllm==0.23.0 vllm==0.24.0",
        "kvpool diff vllm==0.26.0 vllm==0.27.1",
        "Exit status: 0 no difference, 1 differences, 2",
    ):
        assert example in text
