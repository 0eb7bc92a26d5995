"""LMDeploy's block manager with its prefix trie as a manager target: the release's real
files (``DefaultBlockManager``, ``BlockTrie``, the sequence model and its lifecycle),
loaded in isolation and driven by the request machine, judged by the request-level
properties plus the adapter's structure checks.

Each by-design choice the adapter declares is measured here on the real code (a hit is
whole blocks and leaves a token to compute; keys are made when a block is scheduled;
decoded blocks are keyed when the sequence next needs a block; a fresh block is swapped
for the trie's block of the same tokens; eviction is LRU over leaves, of the shortfall
only, stamped in whole seconds; preallocation; adapters as salts), every structure check
is shown to catch a planted fault, and a planted fault in the trie is caught by the
request machine on several seeds.

Needs numpy only (``pip install -e '.[lmdeploy]'``): torch, which LMDeploy's
``messages`` module imports, is a stand-in. Without numpy every test here is skipped, and
says so. The 0.18.0 wheel is downloaded once into the cache (~110 MB).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "numpy", reason="LMDeploy's block manager needs numpy: pip install -e '.[lmdeploy]'"
)

import numpy as np
from kvpool.conformance.engines.lmdeploy.manager import (
    LmdeployManagerFactory,
    LmdeployManagerTarget,
)
from kvpool.conformance.engines.lmdeploy.manager_release import (
    load_manager_release,
)
from kvpool.conformance.machines.pool.lockstep import Nonconformance, RunRecord
from kvpool.conformance.machines.requests.checks import RequestChecks
from kvpool.conformance.machines.requests.property_run import PropertyRun
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.machines.requests.target import RequestSetup
from kvpool.conformance.targets.loading import TargetLoadError, load_manager
from kvpool.spec import SEED, PoolConfig, Profile
from kvpool.spec.manager import (
    Admit,
    Append,
    Compute,
    Finish,
    KVGroup,
    ManagerConfig,
    Preempt,
    Resume,
)
from kvpool.spec.profile import LMDEPLOY

VERSION = "0.18.0"
#: 8 blocks of 2 tokens, caching on.
SETUP = RequestSetup(ManagerConfig(2), PoolConfig(9, True, 2))


#: One release per API generation (``generations.py``): the prefill scheduler (0.18.0) and
#: the scheduler (0.16.0, whose files are the 0.16.0 source as stored upstream).
RELEASES = (VERSION, "0.16.0")


@pytest.fixture(scope="module", params=RELEASES)
def lmdeploy(request: pytest.FixtureRequest) -> LmdeployManagerFactory:
    version = request.param
    factory, name = load_manager("auto", f"lmdeploy=={version}")
    assert isinstance(factory, LmdeployManagerFactory) and name == f"lmdeploy=={version}"
    return factory


def target(factory: LmdeployManagerFactory, setup: RequestSetup = SETUP) -> LmdeployManagerTarget:
    return factory(setup, SEED)


def served(t: LmdeployManagerTarget, rid: str, tokens: tuple[int, ...]) -> int:
    """Admit, compute and finish ``rid``; the tokens its admission found cached."""
    scheduled = t.admit(rid, tokens, None)
    assert scheduled is not None
    t.commit(rid, False)
    t.finish(rid)
    return scheduled.num_computed_tokens


def cached(t: LmdeployManagerTarget) -> set[tuple[int, ...]]:
    """The token paths the trie holds."""
    return {path for _, _, path in t._nodes(t.trie)}


def run(factory: LmdeployManagerFactory, *actions: object) -> str | None:
    """The first difference the property run reports for ``actions`` (``None``: none)."""
    property_run = PropertyRun(factory, SEED, SETUP, RunRecord())
    for action in actions:
        try:
            property_run.apply(action)  # type: ignore[arg-type]
        except Nonconformance as exc:
            return str(exc)
    return None


# --- loading ----------------------------------------------------------------------------


def test_the_release_files_run_without_torch_and_leave_nothing_behind(
    lmdeploy: LmdeployManagerFactory,
) -> None:
    trie = lmdeploy.release.module("pytorch.paging.block_trie.trie").BlockTrie
    assert trie.__module__ == "lmdeploy.pytorch.paging.block_trie.trie"
    messages = lmdeploy.release.module("pytorch.messages")
    assert messages.torch.__doc__.startswith("stand-in for torch")
    assert not any(n.split(".")[0] == "lmdeploy" for n in sys.modules)


def test_manager_forms_load_the_same_files(lmdeploy: LmdeployManagerFactory) -> None:
    factory, name = load_manager("lmdeploy", f"lmdeploy=={VERSION}")
    assert name == f"lmdeploy=={VERSION}" and isinstance(factory, LmdeployManagerFactory)
    tree, name = load_manager(f"lmdeploy@{lmdeploy.release.origin}", "impl")
    assert name == f"lmdeploy@{lmdeploy.release.origin}"
    assert run(tree, Admit("a", (1, 2, 3), None), Compute("a"), Finish("a")) is None


def test_each_generation_admits_through_the_releases_own_scheduler(
    lmdeploy: LmdeployManagerFactory,
) -> None:
    """Both generations build their owners through the release's ``Scheduler``; 0.18.0
    admits through the ``_PrefillScheduler`` it built, 0.16.0 through the ``Scheduler``:
    objects of the release's classes, not of ours."""
    t = target(lmdeploy)
    release = lmdeploy.release
    scheduler = t.engine.scheduler  # type: ignore[attr-defined]
    assert type(scheduler).__module__ == "lmdeploy.pytorch.paging.scheduler"
    assert scheduler.block_trie is t.trie and scheduler.block_manager is t.block_manager
    if release.version == VERSION:
        assert release.generation == "prefill-scheduler"
        owner = scheduler._prefill_scheduler
        assert type(owner).__module__ == "lmdeploy.pytorch.paging.prefill_scheduler"
        assert owner.block_trie is t.trie and owner.block_manager is t.block_manager
    else:
        assert release.generation == "scheduler"
    # a request too large for the pool is refused by the release's rollback, which leaves
    # the sequence unmatched and the trie's blocks as they were
    assert served(t, "a", (1, 2, 3, 4, 5)) == 0
    before = t.view()
    assert t.admit("b", (1, 2, 3, 4) + (9,) * 20, None) is None
    assert t.view() == before


def test_a_tree_without_the_trie_is_refused_or_left_out(tmp_path: Path) -> None:
    (tmp_path / "lmdeploy").mkdir()
    with pytest.raises(TargetLoadError, match=r"lacks lmdeploy/pytorch/block\.py"):
        load_manager(f"lmdeploy@{tmp_path}", "impl")
    # --manager auto on an older tree: no manager run, and the reason in its name
    factory, name = load_manager("auto", f"lmdeploy@{tmp_path}")
    assert factory is None and name.startswith("none (") and "lacks" in name


def test_setups_keep_one_full_attention_group(lmdeploy: LmdeployManagerFactory) -> None:
    wide = RequestSetup(ManagerConfig(4, (KVGroup(), KVGroup(sliding_window_blocks=1))), SETUP.pool)
    assert lmdeploy.supported_setup(wide).manager == ManagerConfig(4, (KVGroup(),))


# --- its by-design choices, measured on the real code -------------------------------------


def test_a_hit_is_whole_blocks_and_leaves_a_token_to_compute(
    lmdeploy: LmdeployManagerFactory,
) -> None:
    t = target(lmdeploy)
    assert served(t, "a", (1, 2, 3, 4, 5)) == 0
    assert served(t, "b", (1, 2, 3, 9)) == 2  # block [1, 2] only: [3, 9] differs
    assert served(t, "c", (1, 2, 3, 4)) == 2  # all cached, yet the last block is computed


def test_a_hit_takes_a_reference_and_the_trie_keeps_its_own(
    lmdeploy: LmdeployManagerFactory,
) -> None:
    t = target(lmdeploy)
    served(t, "a", (1, 2, 3))
    node = next(iter(t.trie._roots[None].children.values()))
    assert int(t.block_manager.allocator.get_ref_count(node.block_id)) == 1  # the trie's
    assert t.admit("b", (1, 2, 5), None) is not None
    assert int(t.block_manager.allocator.get_ref_count(node.block_id)) == 2
    assert t.view().ref_cnt[node.block_id + 1] == 1  # shown: the tables' holds


def test_blocks_are_keyed_when_scheduled(lmdeploy: LmdeployManagerFactory) -> None:
    t = target(lmdeploy)
    assert t.admit("a", (1, 2, 3, 4, 5), None) is not None  # nothing computed yet
    assert cached(t) == {(1, 2), (1, 2, 3, 4)}
    assert t.registers_when_scheduled
    second = t.admit("b", (1, 2, 3, 4, 6), None)
    assert second is not None and second.num_computed_tokens == 4  # hits unwritten blocks


def reserving(factory: LmdeployManagerFactory, tokens: int) -> LmdeployManagerFactory:
    return LmdeployManagerFactory(factory.release, f"prealloc {tokens}", prealloc=tokens)


def test_decoded_blocks_are_keyed_when_the_next_block_is_needed(
    lmdeploy: LmdeployManagerFactory,
) -> None:
    """``schedule_running`` calls ``BlockTrie.allocate`` only when the sequence needs a
    block for one more token: with 4 tokens reserved, decoded blocks wait for it."""
    t = target(reserving(lmdeploy, 4))
    assert t.admit("a", (1, 2, 3), None) is not None  # 3 + 4 tokens: 4 blocks
    t.commit("a", False)
    assert t.keyed_tokens("a") == 2
    assert t.append("a", (4,)) is not None  # [3, 4] full, room left: no key
    t.commit("a", False)
    assert t.keyed_tokens("a") == 2 and (1, 2, 3, 4) not in cached(t)
    assert t.append("a", (5, 6, 7, 8)) is not None  # 9 tokens need a fifth block: keys
    assert t.keyed_tokens("a") == 8 and (1, 2, 3, 4, 5, 6, 7, 8) in cached(t)
    b = target(reserving(lmdeploy, 4))
    assert b.admit("b", (1, 2, 3), None) is not None
    b.commit("b", False)
    assert b.append("b", (4,)) is not None
    b.commit("b", False)
    b.finish("b")  # the computed, unkeyed block [3, 4] is freed, not cached
    assert cached(b) == {(1, 2)}


def test_hit_keys_reads_up_to_the_keyed_prefix_and_needs_to(
    lmdeploy: LmdeployManagerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    actions = (Admit("a", (1, 2, 3), None), Compute("a"), Append("a", (4,)), Compute("a"))
    assert run(reserving(lmdeploy, 4), *actions) is None
    monkeypatch.setattr(LmdeployManagerTarget, "keyed_tokens", None)
    message = run(reserving(lmdeploy, 4), *actions)
    assert message is not None and "property 'hit-keys'" in message, message


def test_a_fresh_block_is_swapped_for_the_tries_block(
    lmdeploy: LmdeployManagerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``BlockTrie.allocate`` meets a node of the same tokens: the sequence's own block is
    freed and its table points at the trie's (here a block the request had computed
    partly: its first token)."""
    t = target(lmdeploy)
    served(t, "a", (1, 2, 3))
    first = t.admit("b", (1,), None)
    assert first is not None and first.tables == ((2,),)
    t.commit("b", False)
    grown = t.append("b", (2,))
    assert grown is not None and grown.tables[0][0] == 1  # a's cached [1, 2]
    assert t.swaps_in_cached
    actions = (
        Admit("a", (1, 2, 3), None),
        Compute("a"),
        Finish("a"),
        Admit("b", (1,), None),
        Compute("b"),
        Append("b", (2,)),
    )
    assert run(lmdeploy, *actions) is None
    monkeypatch.setattr(LmdeployManagerTarget, "swaps_in_cached", False)
    message = run(lmdeploy, *actions)
    assert message is not None and "property 'append-only'" in message, message


def test_eviction_takes_the_least_recently_used_leaf_and_only_the_shortfall(
    lmdeploy: LmdeployManagerFactory,
) -> None:
    t = target(lmdeploy)
    for token in (1, 2, 3, 4):
        served(t, f"r{token}", (token, token, 9))  # four cached leaves [t, t]
    assert t.block_manager.get_num_free_gpu_blocks() == 4
    served(t, "touch", (1, 1, 5))  # a hit stamps [1, 1]: [2, 2] is now the oldest
    assert t.admit("big", (8,) * 9, None) is not None  # 5 blocks, 1 short: one eviction
    assert cached(t) >= {(1, 1), (3, 3), (4, 4)} and (2, 2) not in cached(t)


def test_access_times_are_whole_seconds() -> None:
    """The allocator stores ``time.perf_counter()`` into an int64 array: stamps within one
    second tie (the adapter's clock ticks a second per reading, see manager_release)."""
    import time

    release = load_manager_release(VERSION)
    module = release.module("pytorch.paging.block_manager.base_block_manager")
    allocator = module.LogicalAllocator(0, 4)
    module.time = time
    allocator.update_access_time(np.array([0]))
    allocator.update_access_time(np.array([1]))
    stamps = [int(s) for s in allocator.get_access_time(np.array([0, 1]))]
    assert stamps[0] == int(stamps[0]) and abs(stamps[1] - time.perf_counter()) < 2
    module.time = release.clock
    allocator.update_access_time(np.array([0]))
    allocator.update_access_time(np.array([1]))
    first, second = (int(s) for s in allocator.get_access_time(np.array([0, 1])))
    assert second == first + 1


def test_scheduling_reserves_the_prealloc_tokens(lmdeploy: LmdeployManagerFactory) -> None:
    """``allocate(seq, prealloc)``: room for ``prealloc`` tokens past the sequence (the
    engine's ``prefill_interval``, 16 by default; the suite runs with 1)."""
    assert lmdeploy.prealloc == 1
    small = target(lmdeploy).admit("a", (1, 2, 3, 4), None)
    assert small is not None and len(small.tables[0]) == 3  # 4 + 1 tokens
    engine = LmdeployManagerFactory(lmdeploy.release, "16", prealloc=16)
    setup = RequestSetup(ManagerConfig(2), PoolConfig(13, True, 2))
    big = engine(setup, SEED).admit("a", (1, 2, 3, 4), None)
    assert big is not None and len(big.tables[0]) == 10  # 4 + 16 tokens
    assert engine(SETUP, SEED).admit("a", (1, 2, 3, 4), None) is None  # 8 blocks: refused


def test_a_salt_is_an_adapter_and_adapters_never_share(lmdeploy: LmdeployManagerFactory) -> None:
    t = target(lmdeploy)
    assert t.admit("a", (1, 2, 3), "tenant-b") is not None
    t.commit("a", False)
    other = t.admit("b", (1, 2, 3), None)
    same = t.admit("c", (1, 2, 3), "tenant-b")
    assert other is not None and other.num_computed_tokens == 0
    assert same is not None and same.num_computed_tokens == 2
    assert set(t.trie._roots) == {"tenant-b", None}


def test_preemption_frees_the_blocks_and_a_resume_finds_them_cached(
    lmdeploy: LmdeployManagerFactory,
) -> None:
    t = target(lmdeploy)
    assert t.admit("a", (1, 2, 3, 4, 5), None) is not None
    t.commit("a", False)
    t.preempt("a")
    assert t.view().ref_cnt == (0,) * 9 and t.block_manager.get_num_free_gpu_blocks() == 6
    resumed = t.resume("a")
    assert resumed is not None and resumed.num_computed_tokens == 4
    assert (
        run(lmdeploy, Admit("a", (1, 2, 3), None), Compute("a"), Preempt("a"), Resume("a")) is None
    )


def test_caching_off_keys_nothing(lmdeploy: LmdeployManagerFactory) -> None:
    off = RequestSetup(ManagerConfig(2), PoolConfig(9, False, 2))
    t = target(lmdeploy, off)
    assert served(t, "a", (1, 2, 3)) == 0 and served(t, "b", (1, 2, 3)) == 0
    assert cached(t) == set() and t.view().free_count == 8


# --- the structure checks catch planted faults -------------------------------------------


def _plant(t: LmdeployManagerTarget, fault: str) -> None:
    allocator = t.block_manager.allocator
    nodes = [node for node, _, _ in t._nodes(t.trie)]
    if fault == "trie-block-held":  # the trie's reference dropped, the node kept
        leaf = next(n for n in nodes if not n.children)
        allocator.add_ref_count(np.array([leaf.block_id]), -1)
    elif fault == "trie-block-once":  # two nodes on one block
        nodes[1].block_id = nodes[0].block_id
    elif fault == "trie-node-depth":
        nodes[0].prefix_len += 1
    elif fault == "cached-blocks-evictable":  # a leaf lost from the eviction candidates
        t.trie._kv_lifecycle.leaves.clear()
    elif fault == "free list":  # a double free on the allocator
        allocator.free(np.array([nodes[0].block_id]))
        allocator.free(np.array([nodes[0].block_id]))


@pytest.mark.parametrize(
    "fault",
    [
        "trie-block-held",
        "trie-block-once",
        "trie-node-depth",
        "cached-blocks-evictable",
        "free list",
    ],
)
def test_structure_catches_a_planted_fault(lmdeploy: LmdeployManagerFactory, fault: str) -> None:
    t = target(lmdeploy)
    served(t, "a", (1, 2, 3, 4, 5))
    assert t.structure_problems() == []
    _plant(t, fault)
    problems = t.structure_problems()
    assert any(fault in p for p in problems), problems


def test_an_idle_leak_breaks_idle_pool_free_and_refcounts(lmdeploy: LmdeployManagerFactory) -> None:
    t = target(lmdeploy)
    served(t, "a", (1, 2, 3))
    checks = RequestChecks(SETUP, Counter())
    checks.step_done(t.view())  # idle, one block cached: all free by what evict frees
    t.block_manager.allocator.allocate(1, "gpu")  # leaked: held, in no table, not cached
    with pytest.raises(Nonconformance) as caught:
        checks.step_done(t.view())
    assert "property 'idle-pool-free'" in str(caught.value)
    assert "property 'refcounts-match-tables'" in str(caught.value)


# --- 0.18.0 at the request level, and a planted fault in its trie ------------------------

SEEDS = (1, 2, 3)


def test_the_known_findings_reproduce(lmdeploy: LmdeployManagerFactory) -> None:
    """The seed's contract breaks ``own-contents`` on a hit of the same pass and
    ``write-guard`` on a shared block rewritten; the lmdeploy profile states the first
    (keys at scheduling, within one forward pass), and the second is its finding
    (docs/findings.md)."""
    same_pass = (Admit("a", (1, 2, 3), None), Admit("b", (1, 2, 3, 4), None))
    unwritten = run(lmdeploy, *same_pass)
    assert unwritten is not None and "property 'own-contents'" in unwritten, unwritten
    assert LMDEPLOY.scheduled_keys_within_pass
    assert judged(lmdeploy, LMDEPLOY, *same_pass, Compute("a"), Compute("b")) is None
    # b's table takes a's fresh block (the trie's): the pass has two writers of it
    both = (Admit("a", (1, 2), None), Admit("b", (1, 2), None))
    shared = judged(lmdeploy, SEED, *both, Compute("a"))  # held twice: no write allowed
    assert shared is not None and "property 'write-guard'" in shared, shared
    # within one pass, 'a' keyed the block and writes it; 'b' is the second writer,
    # named whichever computes first
    for order in ((Compute("a"), Compute("b")), (Compute("b"), Compute("a"))):
        shared = judged(lmdeploy, LMDEPLOY, *both, *order)
        assert shared is not None and "property 'write-guard' broken (request 'b'" in shared


def judged(factory: LmdeployManagerFactory, profile: Profile, *actions: object) -> str | None:
    """The first difference a property run under ``profile`` reports (``None``: none)."""
    property_run = PropertyRun(factory, profile, SETUP, RunRecord())
    for action in actions:
        try:
            property_run.apply(action)  # type: ignore[arg-type]
        except Nonconformance as exc:
            return str(exc)
    return None


def test_no_sequence_leaves_or_decodes_before_its_turns_pass(
    lmdeploy: LmdeployManagerFactory,
) -> None:
    """A prefill turn's one pass computes every sequence it admitted before anything
    else: no preempt, finish, or another's decode step is drawn while a block the trie
    attached for a sequence is unwritten. Drawn anyway, the key left behind is stale and
    the checks say so."""
    t = lmdeploy(SETUP, LMDEPLOY)
    t.admit("a", (1, 2, 3), None)
    t.admit("b", (5, 6, 7), None)
    assert not t.allows(Preempt("a")) and not t.allows(Finish("a"))
    assert not t.allows(Append("b", (8,)))
    t.commit("a", False)
    assert t.allows(Preempt("a")) and t.allows(Finish("a")) and not t.allows(Append("a", (4,)))
    t.commit("b", False)
    assert t.allows(Append("a", (4,)))
    early = judged(
        lmdeploy,
        LMDEPLOY,
        Admit("a", (1, 2, 3), None),
        Finish("a"),
        Admit("b", (1, 2, 3, 4), None),
    )
    assert early is not None and "a stale key, registered when request 'a'" in early, early


def _evicts_held_leaves(lmdeploy: LmdeployManagerFactory) -> LmdeployManagerFactory:
    """The release with a fault planted in the trie's eviction: a leaf is evicted without
    asking whether a sequence still holds its block (the ref-count check dropped)."""

    base = lmdeploy.release.module("pytorch.paging.block_trie.kv_lifecycle").KVBlockLifecycle

    class EvictsHeldLeaves(base):  # type: ignore[misc, valid-type]
        def evict(self, max_num_blocks: int) -> int:
            stamp = self.allocator.get_access_time
            evicted: list[int] = []
            while self.leaves and len(evicted) < max_num_blocks:
                leaf = min(self.leaves, key=lambda n: (int(stamp(n.block_id)), n.prefix_len))
                parent = leaf.parent
                leaf.detach_leaf()
                self.leaves.discard(leaf)
                evicted.append(leaf.block_id)
                if parent is not None and parent.parent is not None and not parent.children:
                    self.leaves.add(parent)
            if evicted:
                self.allocator.free(np.array(evicted))
            return len(evicted)

    class Planted(LmdeployManagerFactory):
        def __call__(self, setup: RequestSetup, profile: Any) -> LmdeployManagerTarget:
            built = super().__call__(setup, profile)
            built.trie._kv_lifecycle.__class__ = EvictsHeldLeaves
            return built

    return Planted(lmdeploy.release, "planted")


@pytest.mark.parametrize("seed", SEEDS)
def test_the_request_machine_catches_eviction_of_a_held_block(
    lmdeploy: LmdeployManagerFactory, seed: int
) -> None:
    """At ``kvpool conform``'s default size, up to three distinct findings (the release's
    own two, ``own-contents`` and ``write-guard``, may come first). The held block loses
    its key under the request: ``hit-keys``. Measured spread, seeds 1-5: caught on all
    five, as the second finding, in 2-3 s each."""
    result = run_requests(
        manager_builder(_evicts_held_leaves(lmdeploy), SEED),
        ON_MANAGER,
        max_examples=150,
        steps=40,
        seed=seed,
        max_blocks=8,
        shrink_seconds=0.5,
        max_findings=3,
    )
    messages = [f.message for f in result.failures]
    assert any("property 'hit-keys'" in m for m in messages), messages


def test_conform_runs_both_request_runs_on_an_lmdeploy_target(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from kvpool.conformance.cli import main

    args = ["conform", "--target", f"lmdeploy=={VERSION}", "--machine", "requests"]
    args += ["-n", "10", "--steps", "10", "--seed", "1", "--no-coverage"]
    result = CliRunner().invoke(main, [*args, "--trace-dir", str(tmp_path)])
    assert result.exit_code in (0, 1), result.output
    assert f"manager lmdeploy=={VERSION}" in result.output
    assert "requests/pool" in result.output and "requests/manager" in result.output
    none = CliRunner().invoke(main, [*args, "--manager", "none", "--trace-dir", str(tmp_path)])
    assert none.exit_code == 0 and "requests/manager" not in none.output, none.output
