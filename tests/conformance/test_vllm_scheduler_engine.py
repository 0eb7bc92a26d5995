"""vLLM at the engine machine: the installed release's own v1 ``Scheduler`` (with its
``KVCacheManager``) plans every batch, the suite plays the clients and the model.

vLLM 0.33.0 and 0.34.0 pass seeds 1-3. A fault planted in a copy of the release's own
``scheduler.py`` (a preempted request keeps its computed-token count, so on resuming it
claims tokens whose blocks it gave back) is caught on seeds 1-3 with a shrunk client/model
sequence that replays, and the unplanted release passes that sequence.

The scheduler's config classes import torch and transformers, so it runs from an
installed vLLM (``pip install vllm==0.33.0``: about 0.8 GB unpacked, beside a CPU torch):
without one every test here is skipped, and says so. CI installs none.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "vllm.v1.core.sched.scheduler",
    reason="vLLM's scheduler runs from an installed vLLM: pip install vllm==0.33.0",
)

from kvpool.conformance.engines.vllm.scheduler_driver import VllmSchedulerDriver
from kvpool.conformance.engines.vllm.scheduler_loading import (
    InstalledVllm,
    installed_vllm,
)
from kvpool.conformance.machines.engine.driver import (
    EngineSetup,
    Sampled,
    Submission,
    driver_problems,
)
from kvpool.conformance.machines.engine.runner import replay_engine, run_engine
from kvpool.conformance.machines.pool.runner import LevelResult
from kvpool.conformance.machines.pool.signature import signature
from kvpool.spec.events import BlockStored

#: The planted fault: ``_preempt_request`` no longer resets the request's computed tokens.
PREEMPT_LINES = (
    "        request.status = RequestStatus.PREEMPTED\n        request.num_computed_tokens = 0\n"
)
PLANTED = "        request.status = RequestStatus.PREEMPTED\n"


def drivers(vllm: InstalledVllm) -> Any:
    return lambda setup: VllmSchedulerDriver(vllm, setup, f"vLLM {vllm.version}")


def run(vllm: InstalledVllm, seed: int) -> LevelResult:
    return run_engine(drivers(vllm), max_examples=60, steps=40, seed=seed, max_blocks=12,
                      consumer="count", max_findings=3)  # fmt: skip


@pytest.fixture(scope="module")
def release() -> InstalledVllm:
    return installed_vllm(None)


@pytest.fixture(scope="module")
def planted(release: InstalledVllm, tmp_path_factory: pytest.TempPathFactory) -> InstalledVllm:
    source = Path(release.modules["scheduler"].__file__).read_text(encoding="utf-8")
    assert source.count(PREEMPT_LINES) == 1
    path = tmp_path_factory.mktemp("vllm") / "scheduler.py"
    path.write_text(source.replace(PREEMPT_LINES, PLANTED), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("kvpool_planted_vllm_scheduler", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return InstalledVllm(f"{release.version}, planted", {**release.modules, "scheduler": module})


def test_the_driver_drives_the_releases_own_scheduler(release: InstalledVllm) -> None:
    driver = VllmSchedulerDriver(release, EngineSetup(8, 2), "vllm")
    assert driver_problems(driver) == []
    assert type(driver.scheduler).__module__ == "vllm.v1.core.sched.scheduler"
    manager = driver.scheduler.kv_cache_manager
    assert type(manager).__module__ == "vllm.v1.core.kv_cache_manager"
    assert len(manager.block_pool.blocks) == 8 and driver.free_count() == 7  # null block


def test_the_published_events_are_read_in_the_specs_vocabulary(release: InstalledVllm) -> None:
    driver = VllmSchedulerDriver(release, EngineSetup(8, 2, 8, 2, enable_kv_cache_events=True),
                                 "vllm")  # fmt: skip
    driver.submit(Submission("a", (1, 2, 3, 4, 5), None, 1))
    driver.step()
    driver.report([Sampled("a", 1, True)])
    (stored,) = driver.drain_events()  # the prompt's two full blocks, then freed: kept cached
    assert isinstance(stored, BlockStored) and len(stored.block_hashes) == 2
    assert stored.parent_block_hash is None and stored.num_tokens == 4
    assert driver.drain_events() == []


def test_a_prompt_is_chunked_and_a_stop_finishes_it(release: InstalledVllm) -> None:
    driver = VllmSchedulerDriver(release, EngineSetup(8, 2, 4, 2), "vllm")
    driver.submit(Submission("a", (1, 2, 3, 4, 1, 2), None, 4))
    first = driver.step()
    assert [(r.start, r.num_tokens) for r in first.scheduled] == [(0, 4)]  # the budget
    driver.report([])
    second = driver.step()
    assert [(r.start, r.num_tokens) for r in second.scheduled] == [(4, 2)]
    driver.report([Sampled("a", 3, True)])
    assert driver.step().scheduled == () and driver.free_count() == 7


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_it_passes_with_hits_and_preemptions(release: InstalledVllm, seed: int) -> None:
    result = run(release, seed)
    assert not result.failures, [f.message for f in result.failures]
    judged = result.record.properties
    for name in ("append-only", "own-contents", "write-guard", "refcounts-match-tables",
                 "idle-pool-free", "keys-partitioned", "events-parent-known",
                 "events-removed-known"):  # fmt: skip
        assert judged[name] > 0, name
    assert result.record.situations["hit"] > 0 and result.record.situations["preempted"] > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_preemption_that_keeps_its_computed_tokens_is_caught_shrunk(
    planted: InstalledVllm, release: InstalledVllm, seed: int
) -> None:
    result = run(planted, seed)
    caught = [f for f in result.failures if "property 'own-contents'" in f.message]
    assert caught, [f.message for f in result.failures]
    failure = caught[0]
    assert 2 <= len(failure.trace) <= 10, failure.trace
    found, _ = replay_engine(drivers(planted), failure.config, failure.trace, False, "count")
    assert found is not None and signature(found) == signature(failure.message)
    again, _ = replay_engine(drivers(release), failure.config, failure.trace, False, "count")
    assert again is None
