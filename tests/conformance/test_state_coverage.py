"""The operation x block state matrix: which cells the contract allows (found by exploring
the spec), that the default pool machine reaches every one of them on every seed, and that
the check notices a drawer that leaves a state out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm_api.adapter import VllmApiTarget
from kvpool.conformance.machines.pool import draw, runner
from kvpool.conformance.machines.pool.block_states import BLOCK_STATES
from kvpool.conformance.machines.pool.levels import LEVELS
from kvpool.conformance.machines.pool.operations import POOL_OPERATIONS
from kvpool.conformance.machines.pool.runner import LevelResult, run_level
from kvpool.conformance.machines.pool.state_coverage import (
    Drawable,
    missed,
    reachable_cells,
)
from kvpool.conformance.machines.pool.target import Target
from kvpool.conformance.report import state_matrix
from kvpool.conformance.search.choices import Choices
from kvpool.conformance.targets.loading import load_target
from kvpool.conformance.tools.conform.command import conform
from kvpool.impl import BlockPool, KVCacheBlock
from kvpool.spec import PoolConfig, PoolState, Profile, get_profile
from rich.console import Console

#: ``kvpool conform``'s own defaults, read off the command, so the test runs what a user runs.
DEFAULTS = {p.name: p.default for p in conform.params}
SEEDS = (1, 2, 3, 4, 5)


def default_run(level: str, seed: int) -> LevelResult:
    factory, _ = load_target("impl")
    return run_level(
        factory,
        get_profile("seed"),
        LEVELS[level],
        max_examples=DEFAULTS["max_examples"],
        steps=DEFAULTS["steps"],
        seed=seed,
        max_blocks=DEFAULTS["blocks"],
        max_findings=1,
    )


def drawable(result: LevelResult) -> Drawable:
    assert result.record.drawable is not None
    return result.record.drawable


@pytest.fixture(scope="module")
def default_runs() -> list[LevelResult]:
    return [default_run("safety", seed) for seed in SEEDS]


def test_every_default_run_reaches_every_reachable_cell(
    default_runs: list[LevelResult],
) -> None:
    # the order level draws the same actions as safety at the same seed: safety stands
    # for both; the sweep (conformance/machines/pool/sweep.py) runs a witness for each cell
    # the drawn test cases missed, so this holds on every seed, not between seeds
    first = drawable(default_runs[0])
    for seed, result in zip(SEEDS, default_runs, strict=True):
        assert result.passed, result.failure
        assert missed(result.record.cells, first) == [], seed
    swept = [r.record.swept for r in default_runs]
    print(f"witnesses run at the end of seeds {SEEDS}: {swept}")


class HidesWatchedBlocks(BlockPool):
    """Lookups miss a block whose reuse watcher waits (held, unpinned by another reader):
    a fault only a hit on a block in the rarest state shows."""

    def get_cached_block(
        self, block_hash: bytes, kv_cache_group_ids: Iterable[int]
    ) -> list[KVCacheBlock] | None:
        found = super().get_cached_block(block_hash, kv_cache_group_ids)
        if found and any(b.block_id in self._reuse_watchers for b in found):
            return None
        return found


def test_every_cell_the_drawers_reach_was_found_by_exploring_the_spec(
    default_runs: list[LevelResult],
) -> None:
    for result in default_runs:
        assert set(result.record.cells) <= reachable_cells(drawable(result))


def test_the_check_catches_a_drawer_that_never_picks_free_cached_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    by_state = draw.by_state

    def never_cached(
        data: Choices,
        state: PoolState,
        blocks: Sequence[int],
        label: str,
        weights: Mapping[str, int] = {},
    ) -> int:
        """Blocks drawn by state, never a free block with a key (the null block instead)."""
        kept = [b for b in blocks if state.ref_cnt[b] or state.primary[b] is None] or [0]
        return by_state(data, state, kept, label, weights)

    monkeypatch.setattr(draw, "by_state", never_cached)
    swept = default_run("safety", 1)
    # the sweep reaches what the drawers left out...
    assert missed(swept.record.cells, drawable(swept)) == [] and swept.record.swept >= 3
    # ...and without it, the matrix shows the drawers' gap
    monkeypatch.setattr(runner, "sweep", lambda *args: None)
    result = default_run("safety", 1)
    gaps = missed(result.record.cells, drawable(result))
    for row in ("touch", "evict_blocks", "is_block_writable"):
        assert (row, "free-cached") in gaps
    # the lookups are not drawn by_state: they still hit cached blocks
    assert ("get_cached_block hit", "free-cached") not in gaps


def test_the_exploration_has_converged() -> None:
    for profile in ("seed", "vllm-0.10", "vllm-0.24", "vllm-0.33"):
        chosen = get_profile(profile)
        reach = Drawable(chosen, chosen.operations, chosen.has_evict_first)
        assert reachable_cells(reach) == reachable_cells(reach, depth=6), profile


def test_reachable_cells_follow_the_contract() -> None:
    seed = get_profile("seed")
    cells = reachable_cells(Drawable(seed, seed.operations, True))
    # touch-identity: a free block without a key cannot be touched; move-null, cache-held
    for cell in [
        ("touch", "free-unkeyed"),
        ("touch", "unpinned unkeyed"),
        ("move_block_hashes dst", "null"),
        ("move_block_hashes dst", "registered"),
        ("cache_full_blocks", "free-cached"),
        ("unpin_blocks", "null"),
        ("get_cached_block hit", "private"),
    ]:
        assert cell not in cells, cell
    for cell in [
        ("touch", "unpinned keyed"),
        ("touch", "held watched"),
        ("get_new_blocks", "unpinned keyed"),
        ("get_cached_block hit", "held watched"),
        ("cache_full_blocks", "registered"),  # a partial entry promoted
        ("free_blocks evict_first", "shared unkeyed"),
        ("evict_blocks", "null"),
    ]:
        assert cell in cells, cell
    # without evict_first, its row is empty; vLLM 0.10 has no unpin_blocks: no watchers
    without = reachable_cells(Drawable(seed, seed.operations, False))
    assert not {cell for cell in without if cell[0] == "free_blocks evict_first"}
    old = get_profile("vllm-0.10")
    states = {s for _, s in reachable_cells(Drawable(old, old.operations, False))}
    assert states.isdisjoint({"held watched", "unpinned unkeyed", "unpinned keyed"})


def test_the_matrix_flags_missed_cells_and_marks_unreachable_ones() -> None:
    result = default_run("safety", 1)
    result.record.cells[("is_block_writable", "held watched")] = 0
    console = Console(width=200, record=True)
    console.print(state_matrix(result))
    text = console.export_text()
    words = " ".join(text.split())  # the caption wraps at the table's width
    assert "MISS" in text and "is_block_writable on held watched" in words
    reachable = reachable_cells(drawable(result))
    gaps = len(missed(result.record.cells, drawable(result)))
    assert f"{len(reachable) - gaps} of {len(reachable)} reachable cells reached" in text
    touch = next(line for line in text.splitlines() if line.startswith("touch "))
    assert touch.split()[1 + BLOCK_STATES.index("free-unkeyed")] == "—"


def test_conform_prints_the_matrix_unless_told_not_to() -> None:
    args = ["conform", "--target", "impl", "--machine", "pool", "--level", "safety"]
    args += ["--max-examples", "5", "--seed", "1"]
    shown = CliRunner().invoke(main, args)
    assert shown.exit_code == 0, shown.output
    assert "pool/safety: operation x block state" in shown.output
    hidden = CliRunner().invoke(main, [*args, "--no-coverage"])
    assert hidden.exit_code == 0, hidden.output
    assert "operation x block state" not in hidden.output


class CachesWhileOff(BlockPool):
    """``cache_full_blocks`` with caching off is accepted and ignored instead of refused."""

    def cache_full_blocks(self, *args: Any, **kwargs: Any) -> None:
        if self.enable_caching:
            super().cache_full_blocks(*args, **kwargs)


#: Planted faults only the sweep reaches in a few short test cases: a cell of the rarest
#: state (safety), and a rule no drawn call broke (robustness); each with what it shows.
SWEPT_FAULTS = {
    "hides-watched": (HidesWatchedBlocks, "safety", "get_cached_block"),
    "caches-while-off": (CachesWhileOff, "robustness", "rule 'caching-enabled'"),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("fault", SWEPT_FAULTS)
def test_the_sweep_finds_a_fault_the_drawn_cases_did_not_reach(
    fault: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool_class, level, shows = SWEPT_FAULTS[fault]

    def planted(config: PoolConfig, profile: Profile) -> Target:
        return VllmApiTarget(pool_class, config, profile, name=fault)

    def run() -> LevelResult:
        return run_level(
            planted, get_profile("seed"), LEVELS[level],
            max_examples=3, steps=5, seed=seed, max_blocks=8, max_findings=1,
        )  # fmt: skip

    found = run()
    assert found.failure is not None and found.record.swept > 0
    assert shows in found.failure.message, found.failure.message
    monkeypatch.setattr(runner, "sweep", lambda *args: None)
    assert run().failure is None  # the drawn test cases alone did not reach it


def test_block_states_are_each_blocks_state() -> None:
    """The block states of a pool, read by what decides them, are :func:`block_state` of
    each block: in every state a run of the spec reaches, through every level's draws."""
    from kvpool.conformance.machines.pool.block_states import block_state, block_states
    from kvpool.conformance.machines.pool.machine import next_action
    from kvpool.conformance.search.choices import RandomChoices
    from kvpool.spec import initial_state, step, violation

    profile = get_profile("seed")
    seen: set[str] = set()
    for level in ("safety", "robustness"):
        choices = RandomChoices(f"block states {level}")
        for case in range(40):
            config = draw.pool_config(choices, 6, level == "robustness")
            state = initial_state(config, profile)
            ctx = draw.Context(evict_first=True, peer=True)
            operations = frozenset(op.name for op in POOL_OPERATIONS if op.bad_draws) | frozenset(
                ("get_cached_block", "is_block_writable", "reset_prefix_cache")
            )
            for _ in range(30):
                want = tuple(block_state(state, b) for b in range(state.num_blocks))
                assert block_states(state) == want, (case, state)
                seen.update(want)
                action = next_action(choices, state, ctx, operations, LEVELS[level])
                if action is not None and violation(state, action) is None:
                    state, _ = step(state, action)
    assert seen == set(BLOCK_STATES)  # every state met, so every way to read one is checked
