"""SGLang's page-to-page parent chain, drawn by default and judged (``events-parent-chain``).

SGLang 0.5.23's recorder (``srt/mem_cache/events.py``) publishes one ``BlockStored`` per
page, each naming the page before it as its parent (``_parent_block_hash``: the last page
of the node's parent, ``None`` under the root; coalesced into one event per chain): the
chain a router rebuilds. The tree view names, for every page the tree holds, the page
before it on its path under the hashes the recorder publishes; the events level checks
the links each step's stores name against it. Here: a target naming no page size draws
pages of one token and larger pages; the release's own stream keeps the chain; a parent
named one page too far back (a copy of the release's ``events.py`` naming the first page
of the parent node, a hash the consumer holds, so ``events-parent-known`` passes) is
caught on seeds 1, 2 and 3 at ``kvpool conform``'s default size, shrunk (and the unplanted
release passes the same runs under both consumers: ``KVPOOL_LONG=1``); 0.4.6.post5's
kept finding (a parent never stored) is still the first thing its stream shows, and its
chain is not judged (its tree has no such recorder).

Needs torch and numpy (``pip install -e '.[sglang]'``), a C++ compiler and OpenSSL's
headers (the release's node hash is compiled on first use).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

for _module in ("torch", "numpy"):
    pytest.importorskip(
        _module, reason=f"SGLang's allocator needs {_module}: pip install -e '.[sglang]'"
    )

from engine_managers import first_difference, loaded  # noqa: E402  (this folder is on sys.path)
from kvpool.conformance.machines.pool.levels import REQUEST_MIN_BLOCKS  # noqa: E402
from kvpool.conformance.machines.requests.runner import (  # noqa: E402
    events_on_manager,
    manager_builder,
    run_requests,
)
from kvpool.conformance.machines.requests.target import RequestSetup  # noqa: E402
from kvpool.conformance.run_options import MAX_EXAMPLES, STEPS  # noqa: E402
from kvpool.conformance.targets.loading import load_manager  # noqa: E402
from kvpool.spec import SEED, BlockStored, PoolConfig  # noqa: E402
from kvpool.spec.manager import Admit, Compute, Finish, ManagerConfig  # noqa: E402

VERSION = "0.5.23"
LONG = os.environ.get("KVPOOL_LONG", "") not in ("", "0")
#: The planted fault: the first page of the parent node named, not its last.
LAST_PAGE = "hash_str_to_int64(parent_hash_values[-1])"
FIRST_PAGE = "hash_str_to_int64(parent_hash_values[0])"
#: Two prompts sharing four tokens: the second's node hangs under a split node of 4 pages
#: (of one token) or 2 pages (of two).
SHARED = tuple(
    action
    for i, tokens in enumerate(((1, 2, 3, 4, 5, 6), (1, 2, 3, 4, 9, 9, 9, 9)))
    for action in (Admit(str(i), tokens, None), Compute(str(i)), Finish(str(i)))
)


def setup(page: int) -> RequestSetup:
    """Pages of ``page`` tokens, events on."""
    return RequestSetup(ManagerConfig(page), PoolConfig(30, True, page))


@pytest.fixture(scope="module")
def release() -> Any:
    return loaded(f"sglang=={VERSION}")


@pytest.fixture(scope="module")
def planted(release: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A copy of the release whose recorder names the parent node's first page."""
    tree = tmp_path_factory.mktemp("chain") / "sglang-planted"
    shutil.copytree(release.release.origin, tree)
    path = tree / "sglang" / "srt" / "mem_cache" / "events.py"
    source = path.read_text(encoding="utf-8")
    assert source.count(LAST_PAGE) == 1
    path.write_text(source.replace(LAST_PAGE, FIRST_PAGE), encoding="utf-8")
    factory, _ = load_manager(f"sglang@{tree}", "impl")
    return factory


def test_a_target_naming_no_page_size_draws_pages_of_one_token_and_larger(release: Any) -> None:
    by_hash_block = {
        hbs: release.supported_setup(RequestSetup(ManagerConfig(2 * hbs), PoolConfig(5, True, hbs)))
        for hbs in (1, 2)  # the drawn block size is 2 or 3 hash blocks
    }
    assert {h: s.manager.block_size for h, s in by_hash_block.items()} == {1: 1, 2: 4}
    one, _ = load_manager(f"sglang=={VERSION},page=1", "impl")
    assert one.supported_setup(by_hash_block[2]).manager.block_size == 1


@pytest.mark.parametrize("page", [1, 2])
def test_the_tree_names_each_pages_predecessor_as_the_release_links_it(
    release: Any, page: int
) -> None:
    target = release(setup(page), SEED)  # events on
    linked = []
    for action in SHARED:
        if isinstance(action, Admit):
            target.admit(action.request_id, action.tokens, None)
        elif isinstance(action, Compute):
            target.commit(action.request_id, False)
        else:
            target.finish(action.request_id)
        parents = target.event_parents()
        for event in target.take_events():
            if isinstance(event, BlockStored):
                before = event.parent_block_hash
                for h in event.block_hashes:
                    linked.append((parents[(0, h)], before))
                    before = h
    assert len(linked) == (6 + 4) // page
    assert all(truth == named for truth, named in linked)
    assert sum(named is None for _, named in linked) == 1  # one sequence starts at the root


@pytest.mark.parametrize("consumer", ["count", "set"])
@pytest.mark.parametrize("page", [1, 2])
def test_a_parent_one_page_too_far_back_is_caught(
    release: Any, planted: Any, page: int, consumer: str
) -> None:
    assert first_difference(release, setup(page), *SHARED, consumer=consumer) is None
    found = first_difference(planted, setup(page), *SHARED, consumer=consumer)
    assert found is not None and "property 'events-parent-chain' broken" in found, found
    assert "events-parent-known" not in found


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_planted_parent_is_caught_at_default_settings_shrunk(planted: Any, seed: int) -> None:
    """The ``requests/manager (count)`` run of ``kvpool conform --target sglang@COPY
    --machine requests --level events`` at its default size and page sizes."""
    result = run_requests(
        manager_builder(planted, SEED, "count"), events_on_manager("count"), seed=seed,
        max_examples=MAX_EXAMPLES, steps=STEPS, max_blocks=REQUEST_MIN_BLOCKS, max_findings=1,
        shrink_seconds=1.0,
    )  # fmt: skip
    assert result.failures, f"not caught on seed {seed}"
    failure = result.failures[0]
    assert "property 'events-parent-chain' broken" in failure.message, failure.message
    assert len(failure.trace) <= 6, failure.trace


@pytest.mark.skipif(not LONG, reason="about 10 CPU-s a seed: KVPOOL_LONG=1")
@pytest.mark.parametrize("consumer", ["count", "set"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_release_keeps_its_chain_at_default_settings(
    release: Any, seed: int, consumer: str
) -> None:
    """The unplanted release on the same runs: its own stream keeps the chain."""
    result = run_requests(
        manager_builder(release, SEED, consumer), events_on_manager(consumer), seed=seed,
        max_examples=MAX_EXAMPLES, steps=STEPS, max_blocks=REQUEST_MIN_BLOCKS, max_findings=1,
        shrink_seconds=1.0,
    )  # fmt: skip
    assert not result.failures, result.failures[0].message
    assert result.record.properties["events-parent-chain"] > 0


def test_the_kept_0_4_finding_is_still_the_first_and_its_chain_is_not_judged() -> None:
    """0.4.6.post5 names the root's hash, never stored, as a first node's parent (the
    finding kept on the findings page): that stays ``events-parent-known``; its tree has no
    page-hash recorder, so ``events-parent-chain`` is never asked of it."""
    old = loaded("sglang==0.4.6.post5")
    found = first_difference(old, setup(1), *SHARED, consumer="count")
    assert found is not None and "property 'events-parent-known' broken" in found, found
    assert old(setup(1), SEED).event_parents() is None
