"""SGLang's page-to-page parent chain, judged at the engine machine (``events-parent-chain``).

SGLang 0.5.23's recorder (``srt/mem_cache/events.py``) publishes one ``BlockStored`` per
page, each naming the page before it as its parent (``_parent_block_hash``: the last page
of the node's parent, ``None`` under the root; coalesced into one event per chain): the
chain a router rebuilds. The engine driver of the release's own ``Scheduler`` shows the
chain its tree holds (``event_parents``: every page under the hash the recorder publishes
it by, and the page before it on its path); the engine machine checks the links each
step's stores name against it. Here: the release's own stream keeps the chain; a parent
named one page too far back (a copy of the release's ``events.py`` naming the first page of
the parent node, a hash the consumer holds, so ``events-parent-known`` passes) is caught on
seeds 1, 2 and 3 at ``kvpool conform --machine engine``'s default size, shrunk, and the
unplanted release passes those runs (under both consumers with ``KVPOOL_LONG=1``);
0.4.6.post5's kept finding (a parent never stored) is still the first thing its stream
shows, and its chain is not judged (its tree has no such recorder).

Needs torch and numpy (``pip install -e '.[sglang]'``), a C++ compiler and OpenSSL's
headers (the release's node hash is compiled on first use).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from sglang_planted import planted_tree

for _module in ("torch", "numpy"):
    pytest.importorskip(
        _module, reason=f"SGLang's allocator needs {_module}: pip install -e '.[sglang]'"
    )

from kvpool.conformance.engines.sglang.driver import SglangSchedulerDriver  # noqa: E402
from kvpool.conformance.engines.sglang.scheduler_release import (  # noqa: E402
    SglangScheduler05,
    load_scheduler_tree,
    scheduler_files,
)
from kvpool.conformance.machines.engine.actions import Arrive, RunStep  # noqa: E402
from kvpool.conformance.machines.engine.driver import (  # noqa: E402
    EngineDriverFactory,
    EngineSetup,
    Sampled,
    Submission,
)
from kvpool.conformance.machines.engine.runner import replay_engine, run_engine  # noqa: E402
from kvpool.conformance.run_options import BLOCKS, MAX_EXAMPLES, STEPS  # noqa: E402
from kvpool.conformance.targets.releases.files import cached_files  # noqa: E402
from kvpool.spec import BlockStored  # noqa: E402

VERSION = "0.5.23"
LONG = os.environ.get("KVPOOL_LONG", "") not in ("", "0")
#: The planted fault: the first page of the parent node named, not its last.
LAST_PAGE = "hash_str_to_int64(parent_hash_values[-1])"
FIRST_PAGE = "hash_str_to_int64(parent_hash_values[0])"
#: Two prompts sharing four tokens, each answered with one token: the second's node hangs
#: under a split node of two pages (of two tokens).
PROMPTS = ((1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 9, 9, 9, 9))
SHARED = tuple(
    action
    for i, prompt in enumerate(PROMPTS)
    for action in (Arrive(str(i), prompt, max_new_tokens=1), RunStep())
)
#: Pages of two tokens, events on.
SETUP = EngineSetup(12, 2, 32, 2, enable_kv_cache_events=True)


def drivers(release: SglangScheduler05) -> EngineDriverFactory:
    return lambda setup: SglangSchedulerDriver(release, setup, release.label)


@pytest.fixture(scope="module")
def root() -> Path:
    return cached_files(scheduler_files(), VERSION)


@pytest.fixture(scope="module")
def release(root: Path) -> SglangScheduler05:
    return load_scheduler_tree(root, f"sglang {VERSION}")


@pytest.fixture(scope="module")
def planted(root: Path, tmp_path_factory: pytest.TempPathFactory) -> SglangScheduler05:
    """A copy of the release whose recorder names the parent node's first page."""
    copy = planted_tree(root, tmp_path_factory, "srt/mem_cache/events.py", LAST_PAGE, FIRST_PAGE)
    return load_scheduler_tree(copy, f"sglang {VERSION}, planted")


def test_the_driver_names_each_pages_predecessor_as_the_recorder_links_it(
    release: SglangScheduler05,
) -> None:
    driver = SglangSchedulerDriver(release, SETUP, "sglang")
    assert "event_parents" in driver.capabilities
    linked = []  # (page hash, the page before it in the tree, the parent the stream names)
    for i, prompt in enumerate(PROMPTS):
        driver.submit(Submission(str(i), prompt, max_new_tokens=1))
        driver.step()
        driver.report([Sampled(str(i), 7, True)])
        parents = driver.event_parents()
        for event in driver.drain_events():
            if isinstance(event, BlockStored):
                before = event.parent_block_hash
                for h in event.block_hashes:
                    linked.append((h, parents[(0, h)], before))
                    before = h
    # the first request's three pages, then the second's two past the two it shares
    assert len(linked) == 3 + 2, linked
    assert all(truth == named for _, truth, named in linked)
    first = [h for h, _, _ in linked[:3]]
    assert [named for _, _, named in linked] == [None, first[0], first[1], first[1], linked[3][0]]


@pytest.mark.parametrize("consumer", ["count", "set"])
def test_a_parent_one_page_too_far_back_is_caught(
    release: SglangScheduler05, planted: SglangScheduler05, consumer: str
) -> None:
    kept, _ = replay_engine(drivers(release), SETUP, list(SHARED), False, consumer)
    assert kept is None, kept
    found, _ = replay_engine(drivers(planted), SETUP, list(SHARED), False, consumer)
    assert found is not None and "property 'events-parent-chain' broken" in found, found
    assert "events-parent-known" not in found


def run(release: SglangScheduler05, seed: int, consumer: str) -> Any:
    """``kvpool conform --machine engine --target sglang==0.5.23 --seed SEED`` at its
    default size (its KV events judged by ``consumer``), stopping at the first finding."""
    return run_engine(
        drivers(release), max_examples=MAX_EXAMPLES, steps=STEPS, seed=seed, max_blocks=BLOCKS,
        consumer=consumer, max_findings=1, shrink_seconds=5.0,
    )  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_planted_parent_is_caught_at_default_settings_shrunk(
    planted: SglangScheduler05, seed: int
) -> None:
    result = run(planted, seed, "count")
    assert result.failures, f"not caught on seed {seed}"
    failure = result.failures[0]
    assert "property 'events-parent-chain' broken" in failure.message, failure.message
    assert len(failure.trace) <= 6, failure.trace
    found, _ = replay_engine(drivers(planted), failure.config, list(failure.trace), False, "count")
    assert found is not None and "property 'events-parent-chain' broken" in found, found


@pytest.mark.parametrize(
    "consumer",
    ["count", pytest.param("set", marks=pytest.mark.skipif(not LONG, reason="KVPOOL_LONG=1"))],
)
@pytest.mark.parametrize(
    "seed",
    [
        1,
        *(
            pytest.param(s, marks=pytest.mark.skipif(not LONG, reason="KVPOOL_LONG=1"))
            for s in (2, 3)
        ),
    ],
)
def test_the_release_keeps_its_chain_at_default_settings(
    release: SglangScheduler05, seed: int, consumer: str
) -> None:
    """The unplanted release on the same runs: its own stream keeps the chain."""
    result = run(release, seed, consumer)
    assert not result.failures, result.failures[0].message
    assert result.record.properties["events-parent-chain"] > 0


def test_the_kept_0_4_finding_is_still_the_first_and_its_chain_is_not_judged() -> None:
    """0.4.6.post5's scheduler names the root's hash, never stored, as a first node's
    parent (the finding kept on the findings page): that stays ``events-parent-known``;
    its tree has no page-hash recorder, so its driver does not show ``event_parents`` and
    ``events-parent-chain`` is never asked of it."""
    from kvpool.conformance.engines.sglang import scheduler_release_0_4 as release_0_4
    from kvpool.conformance.engines.sglang.driver_0_4 import SglangScheduler04Driver

    old = release_0_4.load_scheduler_tree(
        cached_files(release_0_4.scheduler_files(), "0.4.6.post5"), "sglang 0.4.6.post5"
    )
    setup = EngineSetup(30, 1, 32, 2, enable_kv_cache_events=True)  # pages of one token

    def factory(setup: EngineSetup) -> SglangScheduler04Driver:
        return SglangScheduler04Driver(old, setup, "sglang==0.4.6.post5")

    found, _ = replay_engine(factory, setup, list(SHARED), False, "count")
    assert found is not None and "property 'events-parent-known' broken" in found, found
    assert "event_parents" not in factory(setup).capabilities
