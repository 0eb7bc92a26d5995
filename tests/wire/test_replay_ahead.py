"""A replay of many traces over the wire starts each trace's pool in the program while the
suite judges the trace before (``plan_next``), with the same results as one trace at a
time: on the C pool with each planted fault, and when a trace needs its program again."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FAULTS
from kvpool.conformance.machines.pool.levels import level_for
from kvpool.conformance.machines.pool.lockstep import REPLAYS_AHEAD, Replay, replay, replay_each
from kvpool.conformance.targets.loading import load_target
from kvpool.conformance.trace.files import read_trace
from kvpool.conformance.wire import child
from kvpool.conformance.wire.entry import WireFactory
from kvpool.conformance.wire.session import Session
from kvpool.spec import (
    Action,
    FreeBlocks,
    GetNewBlocks,
    GetNumFreeBlocks,
    PoolConfig,
    get_profile,
)

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "seed"
SERVED = (sys.executable, "-m", "kvpool.conformance.wire.serve", "impl")


@pytest.fixture
def wire_log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each message sent (its type) and each reply read (``reply``), in order."""
    log: list[str] = []
    send, receive = child.Child.send, child.Child.receive

    def sending(self: child.Child, message: dict[str, Any], what: str, *rest: Any) -> None:
        log.append(message["type"])
        send(self, message, what, *rest)

    def receiving(self: child.Child, what: str) -> bytes:
        log.append("reply")
        return receive(self, what)

    monkeypatch.setattr(child.Child, "send", sending)
    monkeypatch.setattr(child.Child, "receive", receiving)
    return log


def replays(operations: frozenset[str]) -> list[Replay]:
    """The seed profile's vectors whose actions ``operations`` holds, as replays."""
    found = []
    for path in sorted(VECTORS.glob("*/*.itf.json")):
        trace = read_trace(path)
        actions = [a for a in trace.actions if isinstance(a, Action)]
        config = trace.meta.config
        if isinstance(config, PoolConfig) and {a.operation for a in actions} <= operations:
            level = level_for(trace.meta.level, trace.meta.consumer)
            found.append(Replay(get_profile(trace.meta.profile), level, config, actions))
    return found


def one_at_a_time(factory: WireFactory, runs: list[Replay]) -> list[tuple[str | None, Any]]:
    return [replay(factory, r.profile, r.level, r.config, r.actions) for r in runs]


@pytest.mark.parametrize("fault", [None, *FAULTS])
def test_replays_started_ahead_give_what_one_at_a_time_gives(
    build_c_pool: Callable[[str | None], Path], fault: str | None, wire_log: list[str]
) -> None:
    command = (str(build_c_pool(fault)),)
    ahead = WireFactory(Session(command, 60.0))
    probe = ahead(PoolConfig(2), get_profile("seed"))
    runs = replays(probe.operations)
    assert len(runs) > 20
    wire_log.clear()
    got = list(replay_each(ahead, runs))
    # the next pools' inits and batches went as the first's first step was applied
    ahead = ["init", "batch"] * REPLAYS_AHEAD
    assert wire_log[: 5 + len(ahead)] == ["init", "batch", "reply", "reply", *ahead, "reply"]
    alone = one_at_a_time(WireFactory(Session(command, 60.0)), runs)
    assert got == alone
    failed = [found for found, _ in got if found is not None]
    assert bool(failed) == (fault is not None), failed[:3]


def test_a_trace_needing_its_program_again_drops_the_next_pools_and_they_are_sent_again(
    wire_log: list[str],
) -> None:
    profile, level = get_profile("seed"), level_for("safety", None)
    planned = [GetNewBlocks(2), GetNewBlocks(1), FreeBlocks((1,)), GetNumFreeBlocks()]
    applied = [planned[0], planned[2], planned[3]]  # the runner leaves the second out
    after = [GetNewBlocks(3), GetNumFreeBlocks()]
    last = [GetNewBlocks(1), FreeBlocks((0,))]
    factory = WireFactory(Session(SERVED, 60.0))
    in_process, _ = load_target("impl")
    factory(PoolConfig(2), profile)  # the handshake: the program speaks protocol 2
    wire_log.clear()
    factory.plan_next(PoolConfig(6), profile, planned)
    factory.plan_next(PoolConfig(5), profile, after)
    factory.plan_next(PoolConfig(4), profile, last)
    factory.plan_first(planned)
    first, expected = factory(PoolConfig(6), profile), in_process(PoolConfig(6), profile)
    for action in applied:
        assert first.apply(action) == expected.apply(action)
        assert first.view() == expected.view()
    # the first pool, and the next two started ahead at its first step; the skip: the
    # first rebuilt (dropping the next two) with the actions applied and the rest
    sent_ahead = ["init", "batch", "reply", "reply", "init", "batch", "init", "batch"]
    assert wire_log == [*sent_ahead, *["reply"] * 4, "init", "reply", "batch", "reply"]
    wire_log.clear()
    for config, actions in ((PoolConfig(5), after), (PoolConfig(4), last)):
        found, ran = replay(factory, profile, level, config, actions)
        assert found is None and ran == actions
    # each sent again: the second started ahead again by the first
    assert wire_log == ["init", "batch", "reply", "reply", "init", "batch", "reply", "reply"]


def test_a_pool_built_that_was_not_said_ends_what_was_said(wire_log: list[str]) -> None:
    profile = get_profile("seed")
    factory = WireFactory(Session(SERVED, 60.0))
    factory(PoolConfig(2), profile)  # the handshake: the program speaks protocol 2
    factory.plan_next(PoolConfig(5), profile, [GetNewBlocks(3)])
    factory.plan_next(PoolConfig(4), profile, [GetNewBlocks(1)])
    wire_log.clear()
    factory.plan_first([GetNewBlocks(2), GetNumFreeBlocks()])
    factory(PoolConfig(6), profile)  # another run's pool: nothing is started ahead
    assert not factory.then
    assert wire_log == ["init", "batch", "reply"]


def test_a_forked_copy_takes_none_of_its_parents_pools_started_ahead() -> None:
    profile, level = get_profile("seed"), level_for("safety", None)
    actions = [GetNewBlocks(2), GetNumFreeBlocks()]
    factory = WireFactory(Session(SERVED, 20.0))
    factory(PoolConfig(2), profile)  # the handshake: the program speaks protocol 2
    factory.plan_next(PoolConfig(6), profile, [GetNewBlocks(1)])
    factory.plan_next(PoolConfig(5), profile, actions)
    factory.plan_first([GetNewBlocks(1)])
    factory(PoolConfig(6), profile).apply(GetNewBlocks(1))
    assert len(factory.session.upcoming) == 1 and factory.session.child is not None
    parents = factory.session.child.pid
    pid = os.fork()
    if pid == 0:  # the copy: a program of its own, and the pool started there
        code = 1
        try:
            found, _ = replay(factory, profile, level, PoolConfig(5), actions)
            own = factory.session.child
            code = 0 if found is None and own is not None and own.pid != parents else 1
        finally:
            factory.session.close()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    found, _ = replay(factory, profile, level, PoolConfig(5), actions)
    assert found is None and not factory.session.upcoming


EXITING = """
import json, sys
from kvpool.conformance.targets.loading import load_target
from kvpool.conformance.wire import serve

server = serve.Server(load_target("impl")[0], "seed")
for line in sys.stdin:
    message = json.loads(line)
    actions = message.get("actions", [message.get("action")])
    if any(a and a.get("num_blocks") == 7 for a in actions):
        sys.exit(3)
    print(serve.LINE.encode(server.answer(message)), flush=True)
"""


def test_a_program_exiting_on_a_pool_started_ahead_is_told_of_its_own_action(
    tmp_path: Path,
) -> None:
    path = tmp_path / "exiting.py"
    path.write_text(EXITING, encoding="utf-8")
    factory = WireFactory(Session((sys.executable, str(path)), 60.0))
    profile, level = get_profile("seed"), level_for("safety", None)
    factory(PoolConfig(2), profile)  # the handshake: the program speaks protocol 2
    fine = Replay(profile, level, PoolConfig(10), [GetNewBlocks(2), GetNumFreeBlocks()])
    fatal = Replay(profile, level, PoolConfig(10), [GetNewBlocks(1), GetNewBlocks(7)])
    (first, ran_first), (found, ran) = replay_each(factory, [fine, fatal])
    assert first is None and ran_first == fine.actions  # judged before the exit is met
    assert ran == fatal.actions and found is not None
    assert "(apply get_new_blocks)" in found and "status 3" in found, found


@pytest.mark.parametrize("fault", [None, "FAULT_UNKEYED_TO_BACK"])
def test_vectors_check_over_the_wire_replays_in_a_row_in_one_program(
    build_c_pool: Callable[[str | None], Path], fault: str | None, wire_log: list[str]
) -> None:
    """``kvpool vectors check --target exec:...`` starts the program once and replays the
    vectors in a row (the next ones sent while one is judged); each failing vector's line
    is its recorded step and verdict, as the vector replayed alone says."""
    from kvpool.conformance.tools.vectors.check import check_vectors
    from kvpool.conformance.trace.record import record

    target = f"exec:{build_c_pool(fault)}"
    started: list[tuple[str, ...]] = []
    start = child.Child.__init__

    def starting(self: child.Child, command: tuple[str, ...], timeout: float) -> None:
        started.append(command)
        start(self, command, timeout)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(child.Child, "__init__", starting)
        results = check_vectors(VECTORS, target, "seed")
    passed = sum(r.passed for r in results.values())
    failed = [f for r in results.values() for f in r.failed]
    # one program for every vector, and one more for each that failed (recorded alone)
    assert len(started) == 1 + len(failed), (started, failed)
    inits = wire_log.count("init")
    assert passed + len(failed) > 20 and inits >= passed + len(failed)
    assert bool(failed) == (fault is not None)
    shown = [
        (VECTORS / group / name, line) for group, r in results.items() for name, line in r.failed
    ]
    for path, line in shown[:3]:
        alone = record(read_trace(path), target, profile=get_profile("seed"))
        step = alone.diverging_step
        assert step is not None and line == f"step {step}: {alone.steps[step - 1].verdict}"
