"""The wire's values round-trip: every action of every test vector, every outcome and view
the spec gives along the way, and a malformed value is an error naming where it is."""

from __future__ import annotations

from pathlib import Path

import pytest
from kvpool.conformance.engines.builtin.spec_target import SpecTarget
from kvpool.conformance.trace.files import read_trace
from kvpool.conformance.trace.itf import ItfError
from kvpool.conformance.wire.codec import (
    Refusal,
    decode_action,
    decode_outcome,
    decode_view,
    encode_action,
    encode_outcome,
    encode_view,
)
from kvpool.spec import ALL_ACTIONS, Action, get_profile

VECTORS = Path(__file__).resolve().parents[2] / "vectors"


def vector_traces() -> list[Path]:
    return sorted(VECTORS.rglob("*.itf.json"))


def test_the_vectors_cover_every_pool_action() -> None:
    operations = {
        a.operation
        for path in vector_traces()
        for a in read_trace(path).actions
        if isinstance(a, Action)
    }
    assert operations == {a.operation for a in ALL_ACTIONS}


@pytest.mark.parametrize("path", vector_traces()[::7], ids=lambda p: p.stem)
def test_actions_outcomes_and_views_round_trip(path: Path) -> None:
    trace = read_trace(path)
    config = trace.meta.config
    target = SpecTarget(config, get_profile(trace.meta.profile))  # type: ignore[arg-type]
    for action in trace.actions:
        assert decode_action(encode_action(action)) == action
        try:
            outcome = target.apply(action)
        except Exception as exc:  # the spec's refusal: sent as the pool's reason
            refused = decode_outcome(encode_outcome(action, exc))
            assert isinstance(refused, Refusal) and str(exc) in str(refused)
        else:
            assert decode_outcome(encode_outcome(action, outcome)) == outcome
        view = target.view()
        assert decode_view(encode_view(view)) == view


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"operation": "get_new_blocks"}, "needs the field 'num_blocks'"),
        ({"operation": "get_new_blocks", "num_blocks": 1, "colour": 2}, "unknown field"),
        ({"operation": "get_new_blocks", "num_blocks": True}, "action.num_blocks"),
        ({"operation": "launch"}, "unknown operation 'launch'"),
        ({"operation": "touch", "blocks": ["1"]}, r"action.blocks\[0\]"),
    ],
)
def test_a_malformed_action_names_where(data: object, where: str) -> None:
    with pytest.raises(ItfError, match=where):
        decode_action(data)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"free_queue": [1]}, "needs the field 'free_count'"),
        ({"free_count": 1, "colour": 1}, "unknown field"),
        ({"free_count": 1, "keys": [["ab"]]}, r"view.keys\[0\]"),
        ({"free_count": 1, "peer": {"free_count": "x"}}, "view.peer.free_count"),
    ],
)
def test_a_malformed_view_names_where(data: object, where: str) -> None:
    with pytest.raises(ItfError, match=where):
        decode_view(data)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (
            {"tag": "Returned", "value": {"result": {"tag": "Colour", "value": 1}, "fired": []}},
            "unknown result tag 'Colour'",
        ),
        ({"tag": "Returned", "value": {"result": {"tag": "Blocks", "value": [1]}}}, "exactly"),
        ({"tag": "Refused", "value": 3}, "a refusal's reason is a string"),
        ({"tag": "Maybe", "value": 3}, "expected the tag Returned or Refused"),
    ],
)
def test_a_malformed_outcome_names_where(data: object, where: str) -> None:
    with pytest.raises(ItfError, match=where):
        decode_outcome(data)
