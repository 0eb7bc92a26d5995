"""Requests in both KV-cache report modes: a request in the ``"full"`` mode has its
prefix-cache hits published again at every lookup (vLLM 0.33.0's ``get_computed_blocks``),
by the spec's manager, our impl manager and the release's; the count consumer takes a
re-sent store as one more copy no removal answers, the set consumer as nothing new; the
request machine draws both modes where the manager under test takes them; and the
re-send skipped in a copy of vLLM 0.33.0's ``kv_cache_manager.py`` is caught at default
settings on seeds 1, 2 and 3."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.consumers.models import ModelConsumer
from kvpool.conformance.engines.builtin.impl_manager import impl_manager_target
from kvpool.conformance.engines.vllm.distribution import MANAGER_CACHE, cached_release
from kvpool.conformance.engines.vllm.releases import MANAGER_WHEEL_MEMBERS
from kvpool.conformance.machines.pool.levels import REQUEST_MIN_BLOCKS
from kvpool.conformance.machines.pool.lockstep import Nonconformance
from kvpool.conformance.machines.pool.surface import SurfaceMismatch
from kvpool.conformance.machines.requests import draw
from kvpool.conformance.machines.requests.manager_run import ManagerRun
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.machines.requests.target import RequestSetup
from kvpool.conformance.search.choices import RandomChoices
from kvpool.conformance.targets.loading import load_manager
from kvpool.spec import (
    SEED,
    BlockRemoved,
    BlockStored,
    PoolConfig,
    initial_state,
    pool_residency,
)
from kvpool.spec.consumer import EventViolation
from kvpool.spec.events import as_fine
from kvpool.spec.manager import (
    FULL,
    FULL_ATTENTION,
    INCREMENTAL,
    Admit,
    Compute,
    Finish,
    KVGroup,
    ManagerConfig,
    Preempt,
    RequestAction,
    RequestState,
    Resume,
    block_hashes,
    initial_manager_state,
    manager_step,
    resent_events,
)
from kvpool.spec.profile import get_profile
from manager_faults import FAULTS, planted_manager_tree  # on sys.path via pytest

NOT_RESENT = FAULTS["hits not re-sent"]
PROMPT = (1, 2, 3, 4, 5, 6, 7)


def setup(groups: tuple[KVGroup, ...] = (FULL_ATTENTION,), events: bool = True) -> RequestSetup:
    return RequestSetup(
        ManagerConfig(2, groups), PoolConfig(num_gpu_blocks=12, enable_kv_cache_events=events)
    )


def spec_steps(drawn: RequestSetup, actions: list[RequestAction]) -> list[tuple[BlockStored, ...]]:
    """The stores the spec's manager re-sent at each action."""
    pool = initial_state(drawn.pool, SEED)
    state = initial_manager_state(drawn.manager, drawn.pool)
    sent = []
    for action in actions:
        pool, state, _ = manager_step(pool, state, action)
        sent.append(resent_events(pool, state.resent))
    return sent


def test_a_full_request_re_sends_its_hit_once_per_group_without_a_parent() -> None:
    drawn = setup((FULL_ATTENTION, KVGroup(1)))  # a window of 3 tokens: 1 block of 2 read
    first = Admit("a", PROMPT)
    full = Admit("b", (*PROMPT[:6], 9), report_mode=FULL)
    sent = spec_steps(drawn, [first, Compute("a"), full])
    assert sent[:2] == [(), ()]
    hashes = block_hashes(RequestState("b", full.tokens, None, False, ((),), 0, (0,)), 1)
    # 3 hit blocks in both groups: the window's first block is the null block, and is
    # named all the same, as vLLM counts the window's null blocks
    assert sent[2] == tuple(
        BlockStored((hashes[1], hashes[3], hashes[5]), None, g, 2, 6) for g in (0, 1)
    )


@pytest.mark.parametrize(
    ("mode", "events", "resent"), [(INCREMENTAL, True, 0), (FULL, False, 0), (FULL, True, 1)]
)
def test_only_a_full_request_with_events_on_re_sends(mode: str, events: bool, resent: int) -> None:
    sent = spec_steps(
        setup(events=events),
        [Admit("a", PROMPT), Compute("a"), Admit("b", PROMPT, report_mode=mode)],
    )
    assert len(sent[2]) == resent


def test_a_miss_re_sends_nothing_and_a_resume_re_sends_again() -> None:
    sent = spec_steps(
        setup(),
        [
            Admit("a", PROMPT, report_mode=FULL),  # nothing cached yet: no hit
            Compute("a"),
            Preempt("a"),
            Resume("a"),
        ],
    )
    assert sent[0] == ()
    assert [len(s) for s in sent[1:]] == [0, 0, 1]
    assert sent[3][0].block_hashes and sent[3][0].parent_block_hash is None


def test_a_request_refused_for_room_has_re_sent_its_hit() -> None:
    """The lookup re-sends before the room is checked (vLLM's ``get_computed_blocks``
    runs before ``allocate_slots``)."""
    drawn = RequestSetup(ManagerConfig(2), PoolConfig(num_gpu_blocks=4))  # 3 usable blocks
    pool = initial_state(drawn.pool, SEED)
    state = initial_manager_state(drawn.manager, drawn.pool)
    for action in (Admit("a", (1, 2, 3, 4)), Compute("a")):
        pool, state, _ = manager_step(pool, state, action)
    longer = Admit("b", (1, 2, 3, 4, 5, 6, 7, 8), report_mode=FULL)  # 2 blocks hit, 2 more
    pool, state, result = manager_step(pool, state, longer)
    assert result is None and "b" not in state.requests
    assert len(resent_events(pool, state.resent)) == 1


def test_the_impl_manager_re_sends_what_the_spec_does() -> None:
    drawn = setup((FULL_ATTENTION, KVGroup(1)))
    run = ManagerRun(impl_manager_target, SEED, drawn)
    for action in (
        Admit("a", PROMPT),
        Compute("a"),
        Admit("b", (*PROMPT[:6], 9), report_mode=FULL),
        Finish("a"),
        Finish("b"),
    ):
        run.apply(action)  # events compared exactly, and judged, after every step
    stored = [e for e in run.stream_judge.stream if isinstance(e, BlockStored)]
    assert [e.parent_block_hash for e in stored[-2:]] == [None, None]
    assert run.resent_copies, "the re-sent copies are held beside the pool's"


def test_the_count_consumer_counts_a_re_sent_store_and_the_set_consumer_does_not() -> None:
    h = as_fine(b"\x01" * 32)
    stored = BlockStored((h,), None, 0, 2, 2)
    count, kept = ModelConsumer("count"), ModelConsumer("set")
    for consumer in (count, kept):
        assert consumer.apply([stored, stored]) == ()  # a store, then its re-send
    assert count.state.copies(h, 0) == 2
    assert kept.state.copies(h, 0) == 1
    # the pool removes its one block once: the count consumer still holds the re-sent copy
    for consumer in (count, kept):
        consumer.apply([BlockRemoved(h, 0)])
    assert count.state.copies(h, 0) == 1
    assert kept.state.copies(h, 0) == 0


def test_a_count_judge_that_ignored_re_sends_would_fail_the_impl() -> None:
    """The planted judge fault: without the re-sent copies in the truth, the impl's
    honest stream is taken for a count consumer holding too much."""
    run = ManagerRun(impl_manager_target, SEED, setup())
    run.residency = lambda expected: pool_residency(run.pool_state)  # type: ignore[method-assign]
    run.apply(Admit("a", PROMPT))
    run.apply(Compute("a"))
    with pytest.raises(Nonconformance, match="events-replay-index"):
        run.apply(Admit("b", PROMPT, report_mode=FULL))


def test_the_machine_draws_both_modes_only_for_a_manager_that_takes_them() -> None:
    drawn = setup()
    state = initial_manager_state(drawn.manager, drawn.pool)
    both = draw.RequestContext(report_modes=frozenset({INCREMENTAL, FULL}))
    modes = {
        draw.draw_admit(RandomChoices(str(s)), state, both).report_mode  # type: ignore[attr-defined]
        for s in range(40)
    }
    assert modes == {INCREMENTAL, FULL}
    default = draw.RequestContext()
    assert {
        draw.draw_admit(RandomChoices(str(s)), state, default).report_mode  # type: ignore[attr-defined]
        for s in range(40)
    } == {INCREMENTAL}


@pytest.fixture(scope="module")
def not_resent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of vLLM 0.33.0's manager whose ``get_computed_blocks`` never re-sends."""
    release = cached_release("0.33.0", folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS)
    return planted_manager_tree(release, tmp_path_factory.mktemp("not-resent"), NOT_RESENT)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_skipped_re_send_is_caught_at_default_settings(not_resent: Path, seed: int) -> None:
    """The ``requests/manager`` run of ``kvpool conform --machine requests --manager vllm``
    at its defaults (the command itself is run on seed 1 below)."""
    factory, _ = load_manager("vllm", f"vllm@{not_resent}")
    result = run_requests(
        manager_builder(factory, get_profile("vllm-0.33")), ON_MANAGER, seed=seed,
        max_examples=150, steps=40, max_blocks=REQUEST_MIN_BLOCKS, max_findings=1,
        shrink_seconds=1.0,
    )  # fmt: skip
    assert result.failure is not None, f"not caught on seed {seed}"
    assert any(text in result.failure.message for text in NOT_RESENT.caught_by)


def test_the_command_catches_the_skipped_re_send(not_resent: Path, tmp_path: Path) -> None:
    args = ["conform", "--target", f"vllm@{not_resent}", "--machine", "requests"]
    args += ["--manager", "vllm", "--level", "events", "--seed", "1"]
    result = CliRunner().invoke(main, [*args, "--trace-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    found = result.output.split("Nonconformance: requests/manager", 1)
    assert len(found) == 2, result.output
    assert any(text in found[1] for text in NOT_RESENT.caught_by), result.output


def test_a_manager_without_report_modes_is_never_given_a_full_request() -> None:
    """A trace made on a manager that takes both modes, replayed on one that does not, is a
    usage error (exit 2 in ``kvpool replay``), never a finding."""

    def plain(drawn: RequestSetup, profile: object) -> object:
        target = impl_manager_target(drawn, SEED)
        target.report_modes_taken = frozenset()  # type: ignore[misc]
        return target

    run = ManagerRun(plain, SEED, setup())  # type: ignore[arg-type]
    full = Admit("a", PROMPT, report_mode=FULL)
    assert not run.allows(full) and run.allows(Admit("a", PROMPT))
    with pytest.raises(SurfaceMismatch, match="takes no request in the 'full' report mode"):
        run.apply(full)


def test_a_replay_finding_says_how_many_copies_were_re_sent() -> None:
    run = ManagerRun(impl_manager_target, SEED, setup())
    for action in (Admit("a", PROMPT), Compute("a"), Admit("b", PROMPT, report_mode=FULL)):
        run.apply(action)
    (group, h), copies = next(iter(run.resent_copies.items()))
    said = run.told(EventViolation("events-replay-index", h, group, "the pool holds it"))
    assert said.message.endswith(
        f"({copies} of the pool's copies counted are re-sent stores no removal answers)"
    )
    other = EventViolation("events-replay-index", b"\x00" * 32, group, "the pool holds it")
    assert run.told(other) == other


def test_the_release_names_a_windows_null_blocks_as_the_spec_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM 0.33.0's re-send in a sliding-window group counts the hit's null blocks (the
    blocks before the window): under layouts with windows only, its stores are the spec's
    event for event, some of them naming such blocks."""
    windows = ((FULL_ATTENTION, KVGroup(1)), (KVGroup(2),))
    monkeypatch.setattr(draw, "LAYOUTS", windows)
    named_nulls = 0
    compare = ManagerRun.check_events

    def counted(run: ManagerRun, where: str) -> None:
        nonlocal named_nulls
        manager = run.setup.manager
        named_nulls += sum(
            r.num_blocks > manager.window_hit_blocks(r.group_id)
            for r in run.state.resent
            if manager.groups[r.group_id].is_sliding
        )
        compare(run, where)

    monkeypatch.setattr(ManagerRun, "check_events", counted)
    cached_release("0.33.0", folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS)
    factory, _ = load_manager("vllm", "vllm==0.33.0")
    result = run_requests(
        manager_builder(factory, get_profile("vllm-0.33")), ON_MANAGER, seed=1,
        max_examples=150, steps=40, max_blocks=REQUEST_MIN_BLOCKS, max_findings=1,
        shrink_seconds=1.0,
    )  # fmt: skip
    assert result.failure is None, result.failure.message
    assert named_nulls > 0
