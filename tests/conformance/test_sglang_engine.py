"""SGLang 0.5.23 at the engine machine: the release's own ``Scheduler`` methods plan every
batch (``get_next_batch_to_run``, ``process_batch_result``), the suite plays the clients
and the model.

A fault planted in a copy of the release's ``radix_cache.py`` (``inc_lock_ref`` no longer
counts the lock: a running request's prefix is evictable, and the tree's evictable count
drifts) is caught, and the unplanted release does not show it: on a two-action
sequence here (seconds), and with ``KVPOOL_LONG=1`` on the machine's own seeds 1-3, where
the unplanted release passes and the planted one fails with a shrunk sequence that
replays (about five minutes on one core). So are a lock ``release_kv_cache`` keeps
(``common.py``) and a duplicate page ``checkpoint`` keeps (``radix_cache.py``), each on a
short sequence.

What differs from 0.4.6.post5, measured on the scheduler: salts partition the tree, and
KV events are hashed by position with no parent under the root (neither event finding of
0.4.6.post5 is in 0.5.23). The requests machine refuses a 0.5 release (exit 2) and names
this machine: from 0.5 on only the scheduler's own code calls the cache.

Needs the ``sglang`` extra (torch) and the release's files (downloaded into the cache
once).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from sglang_planted import planted_tree

pytest.importorskip("torch", reason="SGLang's allocator needs torch: pip install -e '.[sglang]'")

from kvpool.conformance.engines.sglang.driver import SglangSchedulerDriver
from kvpool.conformance.engines.sglang.generations import is_0_5
from kvpool.conformance.engines.sglang.loader import SglangUnavailable
from kvpool.conformance.engines.sglang.scheduler_release import (
    SglangScheduler05,
    load_scheduler_tree,
    scheduler_files,
)
from kvpool.conformance.machines.engine.actions import Arrive, RunStep
from kvpool.conformance.machines.engine.driver import EngineSetup, Sampled, Submission
from kvpool.conformance.machines.engine.driver_check import driver_problems
from kvpool.conformance.machines.engine.runner import replay_engine, run_engine
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.targets.loading import TargetLoadError, load_manager
from kvpool.conformance.targets.releases.files import cached_files
from kvpool.spec import AllBlocksCleared, BlockStored

VERSION = "0.5.23"
#: The planted fault: a lock taken on a tree node is not counted.
LOCK_LINE = "            node.lock_ref += 1\n"
PLANTED = "            node.lock_ref += 0\n"
LONG = os.environ.get("KVPOOL_LONG") == "1"
SETUP = EngineSetup(8, 2, 32, 2)


def drivers(release: SglangScheduler05) -> Any:
    return lambda setup: SglangSchedulerDriver(release, setup, release.label)


@pytest.fixture(scope="module")
def root() -> Path:
    return cached_files(scheduler_files(), VERSION)


@pytest.fixture(scope="module")
def release(root: Path) -> SglangScheduler05:
    return load_scheduler_tree(root, f"sglang {VERSION}")


def _planted(
    root: Path, tmp_path_factory: pytest.TempPathFactory, rel: str, line: str, replacement: str
) -> SglangScheduler05:
    """The release's scheduler with the one ``line`` of ``rel`` replaced, from a copy."""
    copy = planted_tree(root, tmp_path_factory, rel, line, replacement)
    return load_scheduler_tree(copy, f"sglang {VERSION}, planted")


@pytest.fixture(scope="module")
def planted(root: Path, tmp_path_factory: pytest.TempPathFactory) -> SglangScheduler05:
    return _planted(root, tmp_path_factory, "srt/mem_cache/radix_cache.py", LOCK_LINE, PLANTED)


def test_the_driver_drives_the_releases_own_scheduler(
    release: SglangScheduler05, root: Path
) -> None:
    driver = SglangSchedulerDriver(release, SETUP, "sglang")
    assert driver_problems(driver) == []
    scheduler_class = type(driver.scheduler).__mro__[1]
    assert scheduler_class is release.scheduler.Scheduler
    assert release.scheduler.__file__ is not None
    assert release.scheduler.__file__.startswith(str(root))
    assert driver.free_count() == SETUP.num_blocks - 1


def test_a_second_prompt_hits_what_the_first_left(release: SglangScheduler05) -> None:
    """Two turns of one prompt: the second is granted the first's whole pages but the one
    holding its last token (SGLang recomputes the last token)."""
    driver = SglangSchedulerDriver(release, SETUP, "sglang")
    prompt = (1, 2, 3, 4, 5, 6)
    starts = []
    for rid in ("a", "b"):
        driver.submit(Submission(rid, prompt, None, 1))
        batch = driver.step()
        (planned,) = batch.scheduled
        starts.append(planned.start)
        assert planned.start + planned.num_tokens == len(prompt)
        driver.report([Sampled(rid, 1, True)])
    assert starts == [0, 4]
    assert driver.flush() is True
    assert driver.free_count() == SETUP.num_blocks - 1


def test_a_lock_that_is_not_counted_is_caught(
    release: SglangScheduler05, planted: SglangScheduler05
) -> None:
    """The shrunk sequence the machine finds on seed 1: a 2-token prompt that finishes at
    its prefill: each uncounted ``inc_lock_ref`` takes the node's tokens off the evictable
    count again and ``dec_lock_ref`` never puts them back, so once idle a page is neither
    free nor evictable."""
    actions = [Arrive("r4", (3, 4), None, 1), RunStep(())]
    found, _ = replay_engine(drivers(planted), SETUP, actions, skip=False)
    assert found is not None and "idle-pool-free" in found, found
    clean, _ = replay_engine(drivers(release), SETUP, actions, skip=False)
    assert clean is None, clean


@pytest.mark.skipif(not LONG, reason="seeds 1-3, about five minutes: set KVPOOL_LONG=1")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeds_pass_and_the_planted_fault_is_caught_shrunk(
    release: SglangScheduler05, planted: SglangScheduler05, seed: int
) -> None:
    def run(chosen: SglangScheduler05) -> Any:
        return run_engine(
            drivers(chosen), max_examples=60, steps=40, seed=seed, max_blocks=12, max_findings=3
        )

    clean = run(release)
    assert not clean.failures, [f.message for f in clean.failures]
    assert clean.record.properties["own-contents"] > 0
    assert clean.record.situations["hit"] > 0
    found = run(planted)
    assert found.failures, "the planted fault went unseen"
    failure = found.failures[0]
    assert 2 <= len(failure.trace) <= 12, failure.trace
    again, _ = replay_engine(drivers(planted), failure.config, failure.trace, skip=False)
    assert again is not None and signature(again) == signature(failure.message)


def test_its_kv_events_are_the_release_recorders(release: SglangScheduler05) -> None:
    """A finished prompt's whole pages are published as stored, a flush clears them."""
    setup = EngineSetup(8, 2, 32, 2, enable_kv_cache_events=True)
    driver = SglangSchedulerDriver(release, setup, "sglang")
    driver.submit(Submission("a", (1, 2, 3, 4, 5), None, 1))
    driver.step()
    driver.report([Sampled("a", 1, True)])
    stored = [e for e in driver.drain_events() if isinstance(e, BlockStored)]
    assert sum(len(e.block_hashes) for e in stored) == 2  # pages (1, 2) and (3, 4)
    assert driver.flush() is True
    assert [type(e) for e in driver.drain_events()] == [AllBlocksCleared]


def test_the_requests_machine_refuses_0_5_and_names_the_engine_machine(root: Path) -> None:
    """From 0.5 on only the scheduler's own code calls the cache: the requests machine
    would have to restate it, so a release or a tree of the 0.5 layout is refused."""
    from click.testing import CliRunner
    from kvpool.conformance.cli import main

    result = CliRunner().invoke(
        main, ["conform", "--target", f"sglang=={VERSION}", "--machine", "requests"]
    )
    assert result.exit_code == 2, result.output
    assert "--machine engine" in " ".join(result.output.split())
    with pytest.raises(TargetLoadError, match="--machine engine"):
        load_manager(f"sglang@{root},page=2", "impl")
    assert is_0_5("0.5.23") and is_0_5("0.5.1.post3") and is_0_5("0.6.0")
    assert not is_0_5("0.4.6.post5") and not is_0_5("0.4.10.post2")


def _hit(driver: SglangSchedulerDriver, rid: str, prompt: tuple[int, ...], salt: str | None) -> int:
    """Serve ``rid`` (one prefill, finished by its one token); the tokens found cached."""
    driver.submit(Submission(rid, prompt, salt, 1))
    (planned,) = driver.step().scheduled
    driver.report([Sampled(rid, 1, True)])
    return planned.start


def test_salts_partition_the_tree(release: SglangScheduler05) -> None:
    driver = SglangSchedulerDriver(release, SETUP, "sglang")
    prompt = (1, 2, 3, 4, 5)
    assert _hit(driver, "a", prompt, "tenant-a") == 0
    assert _hit(driver, "b", prompt, "tenant-b") == 0
    assert _hit(driver, "c", prompt, "tenant-a") == 4
    assert _hit(driver, "d", prompt, None) == 0


def test_events_hash_by_position_with_no_parent_under_the_root(
    release: SglangScheduler05,
) -> None:
    """The two event findings of 0.4.6.post5 are not in 0.5.23: a first page names no
    parent, and pages ``(1, 2), (3, 4)`` under ``(7, 8)`` are not published under the
    hashes they have under the root."""
    setup = EngineSetup(8, 2, 32, 2, enable_kv_cache_events=True)
    driver = SglangSchedulerDriver(release, setup, "sglang")
    _hit(driver, "a", (1, 2, 3, 4, 5), None)
    first = [e for e in driver.drain_events() if isinstance(e, BlockStored)]
    assert first[0].parent_block_hash is None
    under_root = {h for e in first for h in e.block_hashes}
    assert len(under_root) == 2
    _hit(driver, "b", (7, 8, 1, 2, 3, 4, 5), None)
    later = [h for e in driver.drain_events() if isinstance(e, BlockStored) for h in e.block_hashes]
    assert len(later) == 3 and not under_root & set(later)


def test_without_a_compiler_the_events_are_a_loading_error(
    release: SglangScheduler05, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release's node hash is compiled on first use; where it cannot be, a driver with
    events says what is missing, and no run starts that would blame SGLang."""
    native = release.modules["sglang.srt.mem_cache.cpp_utils.native_hash"]

    def no_compiler() -> None:
        raise RuntimeError("Failed to load HiCache native hash extension")

    monkeypatch.setattr(native, "_load_native_hash_module", no_compiler)
    setup = EngineSetup(8, 2, 32, 2, enable_kv_cache_events=True)
    with pytest.raises(SglangUnavailable, match="C\\+\\+ compiler, ninja and OpenSSL"):
        SglangSchedulerDriver(release, setup, "sglang")
    assert SglangSchedulerDriver(release, SETUP, "sglang").free_count() == SETUP.num_blocks - 1


def test_a_lock_kept_by_release_kv_cache_is_caught(
    root: Path, release: SglangScheduler05, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``release_kv_cache`` (``common.py``) no longer unlocks: a finished prompt's pages stay
    locked, neither free nor evictable once idle."""
    kept = _planted(
        root, tmp_path_factory, "srt/mem_cache/common.py", "tree_cache.unlock(req.lock)", "pass"
    )
    actions = [Arrive("a", (1, 2, 3, 4, 5), None, 1), RunStep(())]
    found, _ = replay_engine(drivers(kept), SETUP, actions, skip=False)
    assert found is not None and "idle-pool-free" in found, found
    clean, _ = replay_engine(drivers(release), SETUP, actions, skip=False)
    assert clean is None, clean


def test_a_duplicate_kept_by_checkpoint_is_caught(
    root: Path, release: SglangScheduler05, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two requests of one prompt in one prefill: the second's ``checkpoint`` finds the
    first's pages in the tree and must free its own copies; planted, it keeps them."""
    kept = _planted(
        root,
        tmp_path_factory,
        "srt/mem_cache/radix_cache.py",
        "kv_indices[req.kv.cache_protected_len : result.prefix_len],",
        "kv_indices[result.prefix_len : result.prefix_len],",
    )
    prompt = (1, 2, 3, 4, 5)
    actions = [Arrive("a", prompt, None, 3), Arrive("b", prompt, None, 3)]
    actions += [RunStep(()) for _ in range(4)]
    found, _ = replay_engine(drivers(kept), SETUP, actions, skip=False)
    assert found is not None and "idle-pool-free" in found, found
    clean, _ = replay_engine(drivers(release), SETUP, actions, skip=False)
    assert clean is None, clean
