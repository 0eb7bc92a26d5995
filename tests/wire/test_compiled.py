"""The wire's compiled codecs write and read exactly what the trace module does: every
action, outcome and view of a sample of the test vectors, and a malformed value is the
trace module's own error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kvpool.conformance.engines.builtin.spec_target import SpecTarget
from kvpool.conformance.machines.pool.target import PoolView
from kvpool.conformance.trace.files import read_trace
from kvpool.conformance.trace.itf import ItfError, decode, encode
from kvpool.conformance.wire.codec import FIRED, RESULT_TYPES, view_fields
from kvpool.conformance.wire.compiled import decode_fast, encode_fast
from kvpool.spec import Action, GetNewBlocks, get_profile

VECTORS = Path(__file__).resolve().parents[2] / "vectors"


def same_both_ways(value: Any, hint: Any) -> None:
    written = encode_fast(value, hint)
    assert written == encode(value, hint)
    assert decode_fast(written, hint, "v") == decode(written, hint, "v") == value


@pytest.mark.parametrize("path", sorted(VECTORS.rglob("*.itf.json"))[::11], ids=lambda p: p.stem)
def test_vectors_encode_and_decode_as_the_trace_module_does(path: Path) -> None:
    trace = read_trace(path)
    target = SpecTarget(trace.meta.config, get_profile(trace.meta.profile))  # type: ignore[arg-type]
    for action in trace.actions:
        assert isinstance(action, Action)
        same_both_ways(action, type(action))
        try:
            outcome = target.apply(action)
        except Exception:  # a refusal: a string on the wire
            pass
        else:
            same_both_ways(outcome.fired, FIRED)
            hint = result_type(action, outcome.result)
            if hint is not None:
                same_both_ways(outcome.result, hint)
        view = target.view()
        for name, hint in view_fields().items():
            value = getattr(view, name)
            if value is not None and hint is not PoolView:
                same_both_ways(value, hint)


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (frozenset({b"\xab\xcd", b"\x01", b"\xab", b"\x00\x10"}), frozenset[bytes]),
        ((b"\x01\x02", (3, 1)), tuple[bytes, tuple[int, ...]]),
        (((b"\x01", None), (b"\x02", 4)), tuple[tuple[bytes, int | None], ...]),
        ("a reason", str),
    ],
)
def test_sets_fixed_tuples_and_strings_are_written_as_the_trace_module_does(
    value: Any, hint: Any
) -> None:
    same_both_ways(value, hint)


def result_type(action: Action, result: Any) -> Any:
    """The type a result is written as (``None``: nothing, or a usage's float)."""
    if isinstance(result, tuple):
        return RESULT_TYPES["Events" if action.operation == "take_events" else "Blocks"]
    return {bool: bool, int: int, bytes: bytes}.get(type(result))


@pytest.mark.parametrize(
    ("data", "hint"),
    [
        ({"operation": "get_new_blocks", "num_blocks": "2"}, GetNewBlocks),
        ({"operation": "get_new_blocks", "num_blocks": 2, "extra": 1}, GetNewBlocks),
        ({"operation": "get_new_blocks"}, GetNewBlocks),
        ([1, True], tuple[int, ...]),
        ({"#set": ["zz"]}, frozenset[bytes]),
        ({"#tup": [1]}, tuple[int, str]),
        ({"tag": "Maybe", "value": 1}, int | None),
    ],
)
def test_a_malformed_value_is_the_trace_modules_error(data: Any, hint: Any) -> None:
    with pytest.raises(ItfError) as slow:
        decode(data, hint, "here")
    with pytest.raises(ItfError) as fast:
        decode_fast(data, hint, "here")
    assert str(fast.value) == str(slow.value)
