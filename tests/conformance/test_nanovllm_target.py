"""nano-vllm's ``BlockManager`` as a manager target: the distributions' real files, loaded in
isolation, driven by the request machine and judged by the request-level properties.

Upstream issues #144 (a fully cached, block-aligned prompt leaves nothing to compute) and
#163 (a freed block's ``hash_to_block_id`` entry outlives the block's reuse) are shown on
the real code and found by the suite on several seeds; the fork's patch for #163 and what
it costs (a preempted request loses its prefix) are shown too. The checks the property
run adds are shown to catch planted faults.

Needs xxhash and numpy (``pip install -e '.[nanovllm]'``): without them every test
here is skipped, and says so. The distributions' wheels are small (~40 kB) and are
downloaded once into the cache.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

for _module in ("xxhash", "numpy"):
    pytest.importorskip(_module, reason=f"nano-vllm needs {_module}: pip install -e '.[nanovllm]'")

from engine_managers import first_difference, loaded  # noqa: E402  (this folder is on sys.path)
from kvpool.conformance.engines.nanovllm import release as nv  # noqa: E402
from kvpool.conformance.engines.nanovllm.manager import (  # noqa: E402
    NanoVllmManagerFactory,
    NanoVllmManagerTarget,
    supported_setup,
)
from kvpool.conformance.machines.pool.lockstep import Nonconformance, RunRecord  # noqa: E402
from kvpool.conformance.machines.pool.signature import signature  # noqa: E402
from kvpool.conformance.machines.pool.target import PoolView  # noqa: E402
from kvpool.conformance.machines.requests.capabilities import Capabilities  # noqa: E402
from kvpool.conformance.machines.requests.checks import RequestChecks  # noqa: E402
from kvpool.conformance.machines.requests.property_run import PropertyRun  # noqa: E402
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests  # noqa: E402
from kvpool.conformance.machines.requests.target import RequestSetup  # noqa: E402
from kvpool.conformance.targets.loading import TargetLoadError, load_manager  # noqa: E402
from kvpool.spec import SEED, PoolConfig, Profile  # noqa: E402
from kvpool.spec.manager import (  # noqa: E402
    Admit,
    Compute,
    Finish,
    KVGroup,
    ManagerConfig,
    Preempt,
    RequestAction,
    Resume,
)
from kvpool.spec.manager import properties as props  # noqa: E402
from kvpool.spec.profile import PROFILES  # noqa: E402

SETUP = RequestSetup(ManagerConfig(2), PoolConfig(6, True, 1))


@pytest.fixture(scope="module")
def upstream() -> NanoVllmManagerFactory:
    return loaded("nanovllm")


@pytest.fixture(scope="module")
def fork() -> NanoVllmManagerFactory:
    return loaded("nanovllm-fork")


def run(factory: NanoVllmManagerFactory, *actions: object) -> str | None:
    """The first difference the property run reports for ``actions`` (``None``: none)."""
    return first_difference(factory, SETUP, *actions)


# --- loading ----------------------------------------------------------------------------


def test_the_default_is_upstreams_manager_from_nano_vllm_npu(
    upstream: NanoVllmManagerFactory,
) -> None:
    assert upstream.release.label == "nano-vllm-npu 0.0.2"
    assert upstream.release.block_manager.__name__ == "nanovllmnpu.engine.block_manager"
    # the real Sequence, not a stand-in
    assert upstream.release.sequence.Sequence.__module__ == "nanovllmnpu.engine.sequence"
    assert not any(n.split(".")[0] in ("nanovllmnpu", "nanovllm") for n in sys.modules)


def test_loading_leaves_an_installed_nanovllm_alone(fork: NanoVllmManagerFactory) -> None:
    installed = ModuleType("nanovllm")
    sys.modules["nanovllm"] = installed
    try:
        again = nv.load_tree(fork.release.origin, "again")
        assert sys.modules["nanovllm"] is installed
        assert again.block_manager.__name__ == "nanovllm.engine.block_manager"
    finally:
        del sys.modules["nanovllm"]


def test_a_checkout_is_loaded_from_its_path(fork: NanoVllmManagerFactory) -> None:
    factory, name = load_manager(f"nanovllm@{fork.release.origin}", "impl")
    assert name == f"nanovllm@{fork.release.origin}"
    assert run(factory, Admit("a", (1, 2, 3), None)) is None  # type: ignore[arg-type]


def test_a_tree_without_the_manager_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TargetLoadError, match=r"holds no nanovllm/engine/block_manager\.py"):
        load_manager(f"nanovllm@{tmp_path}", "impl")


def test_without_xxhash_the_target_names_the_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "xxhash", None)
    with pytest.raises(TargetLoadError, match=r"pip install -e '\.\[nanovllm\]'"):
        load_manager("nanovllm", "nanovllm")


def test_setups_are_narrowed_to_what_it_has(upstream: NanoVllmManagerFactory) -> None:
    wide = RequestSetup(
        ManagerConfig(2, (KVGroup(), KVGroup(sliding_window_blocks=1))), PoolConfig(6, False)
    )
    narrow = upstream.supported_setup(wide)
    assert narrow.manager.groups == (KVGroup(),) and narrow.pool.enable_caching


# --- its by-design choices, measured on the real code -------------------------------------


def test_it_keys_full_blocks_when_it_schedules_them(upstream: NanoVllmManagerFactory) -> None:
    """registers_when_scheduled: after allocate, before any forward pass, the full blocks
    carry their hashes and are in the index; the partial last block has none."""
    target = upstream(SETUP, SEED)
    target.admit("a", (1, 2, 3, 4, 5), None)
    blocks = target.manager.blocks
    table = target.requests["a"].seq.block_table
    assert [blocks[b].hash != -1 for b in table] == [True, True, False]
    assert set(target.manager.hash_to_block_id.values()) == set(table[:2])
    assert target.registers_when_scheduled


def test_freed_blocks_go_to_the_back_tail_first_and_it_has_no_null_block(
    upstream: NanoVllmManagerFactory,
) -> None:
    manager = upstream.release.block_manager.BlockManager(4, 2)
    seq = upstream.release.sequence.Sequence([1, 2, 3, 4, 5])
    seq.block_size = 2
    manager.allocate(seq)
    assert list(seq.block_table) == [0, 1, 2]  # block 0 is handed out: no null block
    manager.deallocate(seq)
    assert list(manager.free_block_ids) == [3, 2, 1, 0]  # to the back, the tail first


# --- the two upstream issues, on the real code -------------------------------------------


def test_144_a_block_aligned_prompt_fully_cached_leaves_nothing_to_compute(
    upstream: NanoVllmManagerFactory, fork: NanoVllmManagerFactory
) -> None:
    for factory in (upstream, fork):
        target = factory(SETUP, SEED)
        target.admit("a", (1, 2, 3, 4), None)
        second = target.admit("b", (1, 2, 3, 4), None)
        assert second is not None and second.num_computed_tokens == 4
        message = run(
            factory, Admit("a", (1, 2, 3, 4), None), Compute("a"), Admit("b", (1, 2, 3, 4), None)
        )
        assert message is not None and "property 'computes-last-token'" in message, message


def test_163_a_freed_blocks_hash_entry_survives_its_reuse(
    upstream: NanoVllmManagerFactory,
) -> None:
    target = upstream(SETUP, SEED)
    target.admit("a", (1, 2), None)
    target.finish("a")
    target.admit("b", (3, 4, 5, 6, 7, 8, 9, 8, 9), None)  # every block: "a"'s is reused
    manager = target.manager
    stale = [h for h, b in manager.hash_to_block_id.items() if manager.blocks[b].hash != h]
    assert stale, "upstream's stale hash_to_block_id entry is gone"
    message = run(
        upstream,
        Admit("a", (1, 2), None),
        Finish("a"),
        Admit("b", (3, 4, 5, 6, 7, 8, 9, 8, 9), None),
    )
    assert message is not None and "invariant 'map-matches-block-keys'" in message, message


def test_the_fork_drops_the_entry_and_with_it_a_preempted_requests_prefix(
    upstream: NanoVllmManagerFactory, fork: NanoVllmManagerFactory
) -> None:
    actions = (Admit("a", (1, 2, 3, 4, 5), None), Compute("a"), Preempt("a"), Resume("a"))
    assert run(upstream, *actions) is None
    message = run(fork, *actions)
    assert message is not None and "property 'resume-finds-prefix'" in message, message
    assert (
        run(
            fork,
            Admit("a", (1, 2), None),
            Finish("a"),
            Admit("b", (3, 4, 5, 6, 7, 8, 9, 8, 9), None),
        )
        is None
    )


SEEDS = (1, 2, 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_suite_finds_both_issues(upstream: NanoVllmManagerFactory, seed: int) -> None:
    result = run_requests(
        manager_builder(upstream, SEED),
        ON_MANAGER,
        max_examples=25,
        steps=15,
        seed=seed,
        max_blocks=8,
        max_findings=4,
        shrink_seconds=0.5,
    )
    kinds = Counter(signature(f.message) for f in result.failures)
    assert "property computes-last-token" in kinds or "property own-contents" in kinds, kinds
    assert any("map-matches-block-keys" in f.message for f in result.failures), kinds


# --- the property run's own checks catch planted faults ----------------------------------


def test_computes_last_token_catches_a_full_hit() -> None:
    assert props.computes_last_token("r", 3, 4) == []
    broken = props.computes_last_token("r", 4, 4)
    assert [b.property for b in broken] == ["computes-last-token"]


def test_write_guard_of_a_manager_keying_when_scheduled_still_needs_a_sole_holder() -> None:
    checks = RequestChecks(SETUP, Counter())
    checks.declared = Capabilities(registers_when_scheduled=True)
    keyed = frozenset([b"k"])
    view = PoolView(free_count=3, ref_cnt=(0, 1, 2), keys=(frozenset(), keyed, keyed))
    checks.guard("r", 1, True, view, "write")  # held once, keyed when scheduled: fine
    with pytest.raises(Nonconformance, match="property 'write-guard'"):
        checks.guard("r", 2, True, view, "write")
    checks.declared = Capabilities(registers_when_scheduled=False)
    with pytest.raises(Nonconformance, match="property 'write-guard'"):
        checks.guard("r", 1, True, view, "write")


def test_structure_catches_a_planted_stale_entry_and_a_broken_partition(
    upstream: NanoVllmManagerFactory,
) -> None:
    target = upstream(SETUP, SEED)
    target.admit("a", (1, 2, 3), None)
    assert target.structure_problems() == []
    target.manager.hash_to_block_id[12345] = 0
    assert any("stale entry" in p for p in target.structure_problems())
    target = upstream(SETUP, SEED)
    target.manager.free_block_ids.append(0)
    problems = target.structure_problems()
    assert any("lists a block twice" in p for p in problems), problems


def test_conform_runs_the_manager_run_only_and_reports_144(
    upstream: NanoVllmManagerFactory, tmp_path: Path
) -> None:
    from click.testing import CliRunner
    from kvpool.conformance.cli import main

    args = ["conform", "--target", "nanovllm", "-n", "25", "--steps", "15", "--seed", "1"]
    result = CliRunner().invoke(main, [*args, "--no-coverage", "--trace-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "the pool machine is not run" in result.output
    assert "requests/manager" in result.output and "requests/pool" not in result.output
    assert "property 'computes-last-token'" in result.output
    refused = CliRunner().invoke(main, ["conform", "--target", "nanovllm", "--machine", "pool"])
    assert refused.exit_code == 2 and "use --machine requests" in refused.output


def test_the_events_level_is_refused_for_it() -> None:
    from click.testing import CliRunner
    from kvpool.conformance.cli import main

    args = ["conform", "--target", "nanovllm", "--machine", "requests", "--level", "events"]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2, refused.output
    assert "publishes no KV events" in refused.output, refused.output


# --- its profile: keys at scheduling, within one forward pass ----------------------------

NANO = PROFILES["nanovllm"]
SAME_PASS = (
    Admit("a", (1, 2, 3), None),
    Admit("b", (1, 2, 4), None),  # hits a's first block before a's pass writes it
    Compute("a"),
    Compute("b"),
)


def judged(factory: NanoVllmManagerFactory, profile: Profile, *actions: object) -> str | None:
    """The first difference a property run under ``profile`` reports (``None``: none)."""
    property_run = PropertyRun(factory, profile, SETUP, RunRecord())
    for action in actions:
        try:
            property_run.apply(action)  # type: ignore[arg-type]
        except Nonconformance as exc:
            return str(exc)
    return None


def test_its_profile_lets_a_hit_of_the_same_pass_pass(
    upstream: NanoVllmManagerFactory, fork: NanoVllmManagerFactory
) -> None:
    """The seed's contract calls a hit on a block keyed at scheduling a read of unwritten
    KV; the nanovllm profile states the design (the pass writes it before anyone reads)."""
    assert NANO.scheduled_keys_within_pass and not SEED.scheduled_keys_within_pass
    for factory in (upstream, fork):
        as_seed = judged(factory, SEED, *SAME_PASS)
        assert as_seed is not None and "property 'own-contents'" in as_seed, as_seed
        assert judged(factory, NANO, *SAME_PASS) is None


def test_a_request_never_leaves_before_its_pass(upstream: NanoVllmManagerFactory) -> None:
    """Its scheduler runs every request it schedules in that step's pass: no finish or
    preempt is drawn while a block keyed for the request is unwritten. Drawn anyway, the
    key left behind is stale, and the checks say so."""
    target = upstream(SETUP, NANO)
    target.admit("a", (1, 2, 3), None)
    assert not target.allows(Finish("a")) and not target.allows(Preempt("a"))
    target.commit("a", False)
    assert target.allows(Finish("a")) and target.allows(Preempt("a"))
    early = judged(upstream, NANO, SAME_PASS[0], Finish("a"), SAME_PASS[1])
    assert early is not None and "a stale key, registered when request 'a'" in early, early


class _LeavesAnyTime(NanoVllmManagerTarget):
    """A planted fault in the adapter: requests may leave before their pass."""

    def allows(self, action: RequestAction) -> bool:
        return True if isinstance(action, Finish | Preempt) else super().allows(action)


@pytest.mark.parametrize("seed", SEEDS)
def test_under_its_profile_144_and_163_remain_and_a_stale_key_is_caught(
    upstream: NanoVllmManagerFactory, seed: int
) -> None:
    """At the size of ``test_the_suite_finds_both_issues``: the real adapter under its
    profile breaks no ``own-contents`` and still finds #163; the planted adapter's early
    leaves give a stale key. Measured spread, seeds 1-3: as asserted on each."""
    options: dict[str, Any] = dict(
        max_examples=25, steps=15, seed=seed, max_blocks=8, max_findings=4, shrink_seconds=0.5
    )
    found = run_requests(manager_builder(upstream, NANO), ON_MANAGER, **options).failures
    kinds = Counter(signature(f.message) for f in found)
    assert "property own-contents" not in kinds, kinds
    assert any("map-matches-block-keys" in f.message for f in found), kinds
    planted = NanoVllmManagerFactory(upstream.release, "planted", _LeavesAnyTime, supported_setup)
    found = run_requests(manager_builder(planted, NANO), ON_MANAGER, **options).failures
    assert any("a stale key" in f.message for f in found), [f.message for f in found]
