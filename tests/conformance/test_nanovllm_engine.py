"""nano-vllm at the engine machine: the release's own ``Scheduler`` (with its
``BlockManager``) plans every batch, the suite plays the clients and the model.

On seeds 1-3 the one finding of nano-vllm-npu 0.0.2 is upstream issue #144 (a prompt whose
blocks are all cached is scheduled with nothing to compute: ``allocate`` counts every
cached full block, the last included, and ``ModelRunner.prepare_prefill`` then takes
``seq[seq.num_cached_tokens:]``, empty). A fault planted in a copy of the release's
``block_manager.py`` (a hit that does not count its new holder) is caught on seeds 1-3 with
a shrunk client/model sequence that replays, and the unplanted release does not show it.
nano-vllm-fork 20260210's rewritten decode loop preempts a sequence without taking it out
of ``running``: shown here on its own scheduler's state.

Needs xxhash and numpy (``pip install -e '.[nanovllm]'``): without them every test
here is skipped, and says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

for _module in ("xxhash", "numpy"):
    pytest.importorskip(_module, reason=f"nano-vllm needs {_module}: pip install -e '.[nanovllm]'")

from click.testing import CliRunner  # noqa: E402
from kvpool.conformance.cli import main  # noqa: E402
from kvpool.conformance.engines.nanovllm import release as nv  # noqa: E402
from kvpool.conformance.engines.nanovllm.driver import NanoVllmDriver  # noqa: E402
from kvpool.conformance.engines.nanovllm.entry import FORK, UPSTREAM  # noqa: E402
from kvpool.conformance.machines.engine.driver import (  # noqa: E402
    EngineSetup,
    Sampled,
    Submission,
    driver_problems,
)
from kvpool.conformance.machines.engine.runner import replay_engine, run_engine  # noqa: E402
from kvpool.conformance.machines.pool.runner import LevelResult  # noqa: E402
from kvpool.conformance.machines.pool.signature import signature  # noqa: E402
from kvpool.conformance.targets.registry import describe_target  # noqa: E402

#: The planted fault: a cache hit on a block another request holds leaves its count alone.
HIT_LINE = "                    block.ref_count += 1\n"
PLANTED = "                    block.ref_count += 0\n"


def drivers(release: nv.NanoVllmRelease) -> Any:
    return lambda setup: NanoVllmDriver(release, setup, release.label)


def run(factory: Any, seed: int) -> LevelResult:
    return run_engine(factory, max_examples=60, steps=40, seed=seed, max_blocks=12, max_findings=3)


@pytest.fixture(scope="module")
def release() -> nv.NanoVllmRelease:
    return UPSTREAM.release(describe_target("nanovllm"))


@pytest.fixture(scope="module")
def planted(release: nv.NanoVllmRelease, tmp_path_factory: pytest.TempPathFactory) -> Any:
    copy = tmp_path_factory.mktemp("nanovllm") / "release"
    shutil.copytree(release.origin, copy)
    path = copy / "nanovllmnpu" / "engine" / "block_manager.py"
    source = path.read_text(encoding="utf-8")
    assert source.count(HIT_LINE) == 1
    path.write_text(source.replace(HIT_LINE, PLANTED), encoding="utf-8")
    return nv.load_tree(copy, "nano-vllm-npu 0.0.2, planted")


def test_the_driver_drives_the_releases_own_scheduler(release: nv.NanoVllmRelease) -> None:
    driver = NanoVllmDriver(release, EngineSetup(8, 2), "nanovllm")
    assert driver_problems(driver) == []
    assert type(driver.scheduler).__module__ == "nanovllmnpu.engine.scheduler"
    assert type(driver.scheduler.block_manager).__module__ == "nanovllmnpu.engine.block_manager"
    assert len(driver.scheduler.block_manager.blocks) == 7  # no null block of its own


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_its_one_finding_is_upstream_issue_144(release: nv.NanoVllmRelease, seed: int) -> None:
    result = run(drivers(release), seed)
    messages = [failure.message for failure in result.failures]
    assert messages and all("property 'computes-last-token' broken" in m for m in messages)
    assert all("tokens cached: nothing left to compute" in m for m in messages)
    judged = result.record.properties
    for name in ("append-only", "own-contents", "write-guard", "refcounts-match-tables",
                 "idle-pool-free"):  # fmt: skip
        assert judged[name] > 0, name
    assert result.record.situations["hit"] > 0 and result.record.situations["preempted"] > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_hit_that_does_not_count_its_holder_is_caught_shrunk(
    planted: nv.NanoVllmRelease, release: nv.NanoVllmRelease, seed: int
) -> None:
    result = run(drivers(planted), seed)
    caught = [f for f in result.failures if "property 'refcounts-match-tables'" in f.message]
    assert caught, [f.message for f in result.failures]
    failure = caught[0]
    assert 2 <= len(failure.trace) <= 10, failure.trace
    found, _ = replay_engine(drivers(planted), failure.config, failure.trace, skip=False)
    assert found is not None and signature(found) == signature(failure.message)
    again, _ = replay_engine(drivers(release), failure.config, failure.trace, skip=False)
    assert again is None or "refcounts-match-tables" not in again


def test_conform_runs_it_at_the_engine_machine(tmp_path: Path) -> None:
    args = "conform --target nanovllm --machine engine --seed 1 --max-examples 20 --steps 30"
    result = CliRunner().invoke(main, [*args.split(), "--trace-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "computes-last-token" in result.output
    assert "keys-partitioned" in result.output and "not checked" in result.output


def test_the_forks_scheduler_keeps_a_preempted_sequence_running() -> None:
    """nano-vllm-fork's ``schedule`` (decode) calls ``preempt(other_seq)`` on a sequence
    taken from a copy of ``running`` and never removes it from ``running``: it is then
    both waiting and running, and is scheduled twice (the machine's findings on the fork:
    an ``IndexError`` in ``may_append``, a finished request scheduled again)."""
    for entry, kept in ((FORK, True), (UPSTREAM, False)):  # upstream's pops it first
        factory, _ = entry.load_driver(describe_target(entry.name))
        driver = factory(EngineSetup(8, 2, 32, 2))
        for rid, prompt in (("r5", (4,)), ("r6", (4,)), ("r8", (8, 2, 4, 1, 4, 3, 4))):
            driver.submit(Submission(rid, prompt, None, 3))
        preempted: tuple[str, ...] = ()
        for _ in range(4):
            batch = driver.step()
            preempted += batch.preempted
            driver.report([Sampled(p.request_id, 1, False) for p in batch.scheduled])
        assert preempted == ("r8",), entry.name
        seq = driver.sequences["r8"]
        assert seq in driver.scheduler.waiting
        assert (seq in driver.scheduler.running) is kept, entry.name
