"""Protocol 2's batches: planned actions go in one message, an action the runner leaves out
rebuilds the program's pool from what was applied, a program that answers the same actions
differently is an error, and a malformed batch reply names its message."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.targets.loading import load_target
from kvpool.conformance.trace.itf import ItfError
from kvpool.conformance.wire.child import WireError
from kvpool.conformance.wire.codec import view_fields
from kvpool.conformance.wire.session import Session
from kvpool.conformance.wire.target import WireTarget
from kvpool.spec import (
    FreeBlocks,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    PoolConfig,
    get_profile,
)

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
SERVED = (sys.executable, "-m", "kvpool.conformance.wire.serve", "impl")


def test_a_planned_sequence_is_one_batch_and_a_skipped_action_rebuilds_the_pool(
    sends: list[str],
) -> None:
    config, profile = PoolConfig(6), get_profile("seed")
    planned = [GetNewBlocks(2), GetNewBlocks(1), FreeBlocks((1,)), GetNumFreeBlocks()]
    applied = [planned[0], planned[2], planned[3]]  # the runner leaves the second out
    wire = WireTarget(Session(SERVED, 60.0), config, profile)
    factory, _ = load_target("impl")
    in_process = factory(config, profile)
    wire.take_plan(planned)
    for action in applied:
        assert wire.apply(action) == in_process.apply(action)
        assert wire.view() == in_process.view()
    wire.session.close()
    # the plan in one batch; the skip: a fresh pool given what was applied and the rest
    assert sends == ["init", "batch", "init", "batch"]


def test_without_a_plan_each_action_is_one_apply(sends: list[str]) -> None:
    wire = WireTarget(Session(SERVED, 60.0), PoolConfig(4), get_profile("seed"))
    wire.apply(GetNewBlocks(1))
    wire.apply(GetNumFreeBlocks())
    wire.session.close()
    assert sends == ["init", "apply", "apply"]


DRIFTING = """
    import json, sys
    count = 0
    for line in sys.stdin:
        m = json.loads(line)
        count += 1
        if m["type"] == "init":
            r = {"type": "init_ok", "protocol": 2, "name": "drifting", "profile": "seed",
                 "operations": ["get_num_free_blocks", "get_usage"], "observes": [],
                 "view": {"free_count": 3}}
        else:
            actions = m["actions"] if m["type"] == "batch" else [m["action"]]
            result = {"tag": "Int", "value": count}
            steps = [{"outcome": {"tag": "Returned", "value": {"result": result, "fired": []}},
                      "view": {"free_count": 3}} for _ in actions]
            if m["type"] == "batch":
                r = {"type": "applied_batch", "steps": steps[:STEPS]}
            else:
                r = {"type": "applied", **steps[0]}
        r["in_reply_to"] = m["id"]
        print(json.dumps(r), flush=True)
"""


def program(tmp_path: Path, steps: str = "None") -> tuple[str, ...]:
    path = tmp_path / "drifting.py"
    path.write_text(textwrap.dedent(DRIFTING).replace("STEPS", steps), encoding="utf-8")
    return (sys.executable, str(path))


def test_a_program_answering_the_same_actions_differently_is_an_error(tmp_path: Path) -> None:
    wire = WireTarget(Session(program(tmp_path), 30.0), PoolConfig(4), get_profile("seed"))
    wire.take_plan([GetNumFreeBlocks(), GetUsage()])
    wire.apply(GetNumFreeBlocks())
    with pytest.raises(WireError, match=r"not deterministic: .* action 1 \(get_num_free_blocks\)"):
        wire.apply(GetNumFreeBlocks())  # not the planned get_usage: the pool is rebuilt


def test_a_batch_reply_with_too_few_steps_names_the_message(tmp_path: Path) -> None:
    wire = WireTarget(Session(program(tmp_path, "1"), 30.0), PoolConfig(4), get_profile("seed"))
    wire.take_plan([GetNumFreeBlocks(), GetUsage()])
    with pytest.raises(WireError, match=r"message 2 \(batch of 2 actions\) is malformed: steps"):
        wire.apply(GetNumFreeBlocks())


def test_a_view_may_leave_out_only_what_its_first_view_shows(tmp_path: Path) -> None:
    session = Session(SERVED, 60.0)
    wire = WireTarget(session, PoolConfig(4), get_profile("seed"))
    shown = wire.view()
    wire.apply(GetNumFreeBlocks())  # nothing changes: the program's view is its free count
    assert wire.view() == shown and shown.free_queue is not None
    assert session.views.shown is not None
    hidden = sorted(set(view_fields()) - session.views.shown)[0]
    with pytest.raises(ItfError, match=rf"\['{hidden}'\] not in the pool's first view"):
        session.views.read({"free_count": 3, hidden: []})
    session.close()


def test_a_replayed_vector_goes_to_the_program_in_one_batch(sends: list[str]) -> None:
    vector = sorted((VECTORS / "seed" / "free_blocks").glob("*.itf.json"))[0]
    served = "exec,timeout=60:" + " ".join(SERVED)
    result = CliRunner().invoke(main, ["replay", str(vector), "--target", served])
    assert result.exit_code == 0, result.output
    applies = [kind for kind in sends if kind in ("apply", "batch")]
    assert "batch" in applies and applies.count("apply") <= 1, applies
