"""Knob ``flushes_under_pressure``: a pool that drops every free block's keys when an
allocation would evict a cached block (instead of evicting one block at a time) is judged
conformant under a profile file that says so, and a flush that leaves a stale key in the
index is caught (``flushing_pools.py``: the sound pool and the planted fault)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.spec import (
    SEED,
    BlockRemoved,
    CacheFullBlocks,
    FreeBlocks,
    GetNewBlocks,
    PoolConfig,
    TakeEvents,
    get_profile,
    initial_state,
    run,
    step,
)
from kvpool.spec.hashing import request_block_hashes

H = request_block_hashes([1, 2, 3], 1)
PROFILE = """\
base = "seed"
description = "a pool that flushes its cache when an allocation would evict"

[knobs.flushes_under_pressure]
value = true
reason = "an allocation that would evict a cached block drops every free block's keys"
"""


@pytest.fixture
def profile_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "flushing.toml"
    path.write_text(PROFILE)
    return path


def conform(pool: str, seed: int, *more: str) -> Result:
    target = ["conform", "--target", f"flushing_pools:{pool}", "--seed", str(seed)]
    return CliRunner().invoke(main, [*target, "--no-coverage", *more])


def test_an_allocation_that_would_evict_flushes_every_free_key_first() -> None:
    flushing = replace(SEED, name="flushing", flushes_under_pressure=True)
    config = PoolConfig(5, enable_kv_cache_events=True)
    # blocks 1..3 keyed H[0..2] and freed tail first: the queue is 4, 3, 2, 1
    cached = (GetNewBlocks(3), CacheFullBlocks(H, (1, 2, 3), 0, 3, 1), FreeBlocks((3, 2, 1)))
    for profile in (flushing, SEED):
        s = run(initial_state(config, profile), *cached, TakeEvents(), GetNewBlocks(1))
        assert all(s.keys_of(b) for b in (1, 2, 3))  # block 4 had no key: no pressure
        s, seen = step(run(s, GetNewBlocks(1)), TakeEvents())  # block 3 is evicted
        flushed = profile is flushing
        assert [b for b in (1, 2) if s.keys_of(b)] == ([] if flushed else [1, 2])
        assert s.free_queue == (2, 1)  # the queue keeps its order
        assert isinstance(seen.result, tuple)
        removed = H if flushed else H[2:]
        assert sorted(seen.result) == sorted(BlockRemoved(h, 0) for h in removed)


def test_a_flushing_pool_passes_under_its_file(profile_file: Path) -> None:
    result = conform("FlushingPool", 1, "--profile", str(profile_file))
    assert result.exit_code == 0, result.output
    for row in ("pool/safety", "pool/order", "pool/robustness", "pool/events", "requests/pool"):
        assert row in result.output


def test_judged_by_the_seed_a_flush_reads_as_lost_keys(profile_file: Path) -> None:
    result = conform("FlushingPool", 1, "--level", "safety", "--machine", "pool")
    assert result.exit_code == 1, result.output
    assert "invariant 'map-matches-block-keys'" in result.output


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_flush_that_keeps_a_stale_key_is_caught(profile_file: Path, seed: int) -> None:
    more = ("--level", "safety", "--machine", "pool", "--profile", str(profile_file))
    result = conform("FlushKeepsStale", seed, *more)
    assert result.exit_code == 1, result.output
    assert "after get_new_blocks: index: key" in result.output
    assert "expected [] (invariant 'map-matches-block-keys'" in result.output


def test_derive_measures_it_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "derived.toml"
    result = CliRunner().invoke(
        main, ["profile", "derive", "--target", "flushing_pools:FlushingPool", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "[knobs.flushes_under_pressure]" in text and text.count("[knobs.") == 1, text
    assert get_profile(str(out)).flushes_under_pressure
