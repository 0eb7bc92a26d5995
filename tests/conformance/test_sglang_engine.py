"""SGLang 0.5.23 at the engine machine: the release's own ``Scheduler`` methods plan every
batch (``get_next_batch_to_run``, ``process_batch_result``), the suite plays the clients
and the model.

A fault planted in a copy of the release's ``radix_cache.py`` (``inc_lock_ref`` no longer
counts the lock: a running request's prefix is evictable, and the tree's evictable count
drifts) is caught, and the unplanted release does not show it: on a two-action
sequence here (seconds), and with ``KVPOOL_LONG=1`` on the machine's own seeds 1-3, where
the unplanted release passes and the planted one fails with a shrunk sequence that
replays (about five minutes on one core).

Needs the ``sglang`` extra (torch) and the release's files (downloaded into the cache
once).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="SGLang's allocator needs torch: pip install -e '.[sglang]'")

from kvpool.conformance.engines.sglang.driver import SglangSchedulerDriver
from kvpool.conformance.engines.sglang.scheduler_release import (
    SglangScheduler05,
    load_scheduler_tree,
    scheduler_files,
)
from kvpool.conformance.machines.engine.actions import Arrive, RunStep
from kvpool.conformance.machines.engine.driver import (
    EngineSetup,
    Sampled,
    Submission,
    driver_problems,
)
from kvpool.conformance.machines.engine.runner import replay_engine, run_engine
from kvpool.conformance.machines.pool.signature import signature
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


@pytest.fixture(scope="module")
def planted(root: Path, tmp_path_factory: pytest.TempPathFactory) -> SglangScheduler05:
    copy = tmp_path_factory.mktemp("sglang") / "release"
    shutil.copytree(root, copy)
    path = copy / "sglang" / "srt" / "mem_cache" / "radix_cache.py"
    source = path.read_text(encoding="utf-8")
    assert source.count(LOCK_LINE) == 1
    path.write_text(source.replace(LOCK_LINE, PLANTED), encoding="utf-8")
    return load_scheduler_tree(copy, f"sglang {VERSION}, planted")


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
