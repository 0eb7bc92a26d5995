"""A drawn test case's steps go to a program in batches, drawn ahead from the states the
spec predicts: the run's draws, findings and traces are those of a run one action a
message, also where the program's answers are not the ones predicted, and a program that
dies on an action drawn ahead the run never comes to is asked again one action a message."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kvpool.conformance.machines.pool import lookahead
from kvpool.conformance.machines.pool.levels import level_for
from kvpool.conformance.machines.pool.runner import LevelResult, run_level
from kvpool.conformance.wire import session as wire_session
from kvpool.conformance.wire.child import ProgramGone
from kvpool.conformance.wire.entry import WireFactory
from kvpool.conformance.wire.session import Session
from kvpool.conformance.wire.target import WireTarget
from kvpool.spec import FreeBlocks, GetNumFreeBlocks, GetUsage, PoolConfig, get_profile


def run(command: tuple[str, ...], level: str, seed: int) -> LevelResult:
    session = Session(command, 60.0)
    try:
        return run_level(
            WireFactory(session),
            get_profile("seed"),
            level_for(level),
            max_examples=15,
            steps=40,
            seed=seed,
            max_blocks=8,
            shrink_seconds=5.0,
        )
    finally:
        session.close()


def seen(result: LevelResult) -> tuple[Any, ...]:
    """What a run drew and found, its speed aside."""
    record = result.record
    return (
        record.examples,
        record.steps,
        record.valid,
        record.skipped,
        record.rejected,
        dict(record.operations),
        dict(record.situations),
        dict(record.cells),
        record.trace,
        [(f.message, f.trace) for f in result.failures],
    )


@pytest.mark.parametrize(
    ("fault", "level", "rewinds"),
    [
        (None, "events", False),  # a pool the spec predicts: no step drawn again
        ("FAULT_UNKEYED_TO_BACK", "safety", True),  # blocks in another order: passes
        ("FAULT_DOUBLE_HANDOUT", "safety", True),  # a finding, shrunk
    ],
)
def test_draws_ahead_are_the_draws_of_a_run_one_action_a_message(
    build_c_pool: Callable[[str | None], Path],
    monkeypatch: pytest.MonkeyPatch,
    sends: list[str],
    fault: str | None,
    level: str,
    rewinds: bool,
) -> None:
    program = (str(build_c_pool(fault)),)
    rewound: list[int] = []
    rewind = lookahead.Lookahead.rewind
    monkeypatch.setattr(
        lookahead.Lookahead, "rewind", lambda self: rewound.append(1) or rewind(self)
    )
    drawn: list[int] = []
    taken = lookahead.Lookahead.next
    monkeypatch.setattr(lookahead.Lookahead, "next", lambda self: drawn.append(1) or taken(self))
    batched = run(program, level, 1)
    # a pool the spec mispredicts is soon sent one action a message
    assert sends.count("batch") > (0 if rewinds else sends.count("apply"))
    assert bool(rewound) is rewinds and drawn
    sends.clear()
    drawn.clear()
    monkeypatch.setattr(wire_session, "PROTOCOL", 1)  # the program answers protocol 1
    alone = run(program, level, 1)
    assert "batch" not in sends
    assert not drawn  # a program of protocol 1 takes no plan: nothing is drawn ahead
    assert seen(batched) == seen(alone)
    assert bool(batched.failures) is (fault == "FAULT_DOUBLE_HANDOUT")


#: A pool speaking protocol 2 that exits when a batch holds ``get_usage``.
DIES = """
    import json, sys
    for line in sys.stdin:
        m = json.loads(line)
        if m["type"] == "init":
            r = {"type": "init_ok", "protocol": 2, "name": "dies", "profile": "seed",
                 "operations": ["get_num_free_blocks", "get_usage"], "observes": [],
                 "view": {"free_count": 3}}
        else:
            actions = m["actions"] if m["type"] == "batch" else [m["action"]]
            if any(a["operation"] == "get_usage" for a in actions):
                sys.exit(4)
            step = {"outcome": {"tag": "Returned", "value": {"result": {"tag": "Int",
                    "value": 3}, "fired": []}}, "view": {"free_count": 3}}
            r = ({"type": "applied_batch", "steps": [step] * len(actions)}
                 if m["type"] == "batch" else {"type": "applied", **step})
        r["in_reply_to"] = m["id"]
        print(json.dumps(r), flush=True)
"""


def test_a_program_dying_on_an_action_drawn_ahead_is_asked_again_one_action_a_message(
    tmp_path: Path, sends: list[str]
) -> None:
    path = tmp_path / "dies.py"
    path.write_text(textwrap.dedent(DIES), encoding="utf-8")
    session = Session((sys.executable, str(path)), 30.0)
    wire = WireTarget(session, PoolConfig(4), get_profile("seed"))
    wire.take_plan([GetNumFreeBlocks(), GetNumFreeBlocks(), GetUsage()])
    assert wire.apply(GetNumFreeBlocks()).result == 3  # the batch died: asked again
    assert wire.apply(GetNumFreeBlocks()).result == 3
    assert sends == ["init", "batch", "init", "apply", "apply"]
    assert not session.batches
    with pytest.raises(ProgramGone, match=r"message 6 \(apply get_usage\).*status 4"):
        wire.apply(GetUsage())  # the action itself: the error names it
    session.close()


#: A pool speaking protocol 2 whose every view shows a free queue of 20,000 blocks (a
#: batch's reply is megabytes, more than a pipe holds).
WIDE = """
    import json, sys
    queue = list(range(1, 20001))
    for line in sys.stdin:
        m = json.loads(line)
        view = {"free_count": len(queue), "free_queue": queue}
        if m["type"] == "init":
            r = {"type": "init_ok", "protocol": 2, "name": "wide", "profile": "seed",
                 "operations": ["get_num_free_blocks", "free_blocks"],
                 "observes": ["free_queue"], "view": view}
        else:
            step = {"outcome": {"tag": "Returned", "value": {"result": {"tag": "Nothing",
                    "value": {"#tup": []}}, "fired": []}}, "view": view}
            r = {"type": "applied_batch", "steps": [step] * len(m["actions"])}
        r["in_reply_to"] = m["id"]
        print(json.dumps(r), flush=True)
"""


def test_a_long_message_is_sent_after_the_replies_before_it_are_read(tmp_path: Path) -> None:
    """The program writes a long reply while the suite writes a long batch: the suite reads
    first, else each would wait for the other to read (the test fails, not hangs)."""
    path = tmp_path / "wide.py"
    path.write_text(textwrap.dedent(WIDE), encoding="utf-8")
    session = Session((sys.executable, str(path)), 60.0)
    wire = WireTarget(session, PoolConfig(20001), get_profile("seed"))
    long_free = FreeBlocks(tuple(range(1, 20001)))  # a message of about 120 kB
    actions = [GetNumFreeBlocks()] * 40 + [long_free]
    wire.take_plan(actions)
    ended: list[BaseException | None] = []

    def run() -> None:
        try:
            for action in actions:
                wire.apply(action)
            ended.append(None)
        except BaseException as exc:  # handed to the test's thread
            ended.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(90)
    if worker.is_alive():
        assert session.child is not None
        os.kill(session.child.pid, signal.SIGKILL)  # by its pid: the suite's write ends
        worker.join(30)
        pytest.fail("the suite and the program each waited for the other to read")
    session.close()
    assert ended == [None]
