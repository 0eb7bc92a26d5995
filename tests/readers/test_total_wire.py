"""Frames and batches (conformance/tools/stream/wire.py) are total: any message decodes or is
one MalformedFrame; the monitor's core counts it and goes on. Raw bytes and hostile
structure; and the same strategies find the crash of issue 27 in a decoder that, like the
old one, caught only the msgpack library's own error."""

from __future__ import annotations

import threading

import msgspec
import pytest
from hostile import FUZZ, escapes, hostile_messages, hostile_payloads, sequence_frames
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from kvpool.conformance.tools.stream.watch import StreamWatch
from kvpool.conformance.tools.stream.wire import (
    MalformedFrame,
    WireBatch,
    WireMessage,
    decode_batch,
    decode_message,
)


@FUZZ
@given(st.binary(max_size=400))
def test_any_bytes_are_a_batch_or_one_malformed_frame(payload: bytes) -> None:
    assert escapes(lambda: decode_batch(payload), MalformedFrame) is None


@FUZZ
@given(hostile_payloads())
def test_any_hostile_payload_is_a_batch_or_one_malformed_frame(payload: bytes) -> None:
    try:
        batch = decode_batch(payload)
    except MalformedFrame as exc:
        assert str(exc), "a malformed frame says what is wrong"
    else:
        assert isinstance(batch, WireBatch)


@FUZZ
@given(hostile_messages())
def test_any_message_is_decoded_or_one_malformed_frame(frames: list[bytes]) -> None:
    try:
        got = decode_message(frames)
    except MalformedFrame:
        return
    assert isinstance(got, WireMessage) and len(frames) == 3


@FUZZ
@given(st.lists(hostile_messages(), min_size=1, max_size=6))
def test_the_monitor_core_counts_every_bad_message_and_goes_on(stream: list[list[bytes]]) -> None:
    found = []
    watch = StreamWatch("set", found.append)
    for frames in stream:
        watch.feed_frames(frames)
    bad = 0
    for frames in stream:
        try:
            decode_message(frames)
        except MalformedFrame:
            bad += 1
    # a message that decodes is malformed still when its sequence is past any plausible
    # gap or its rank past the ranks followed (the monitor's own bounds, said in its text)
    bounded = sum(
        f.kind == "malformed" and ("past the next expected" in f.message or "refused" in f.message)
        for f in found
    )
    assert watch.totals.malformed == bad + bounded
    assert sum(f.kind == "malformed" for f in found) == bad + bounded


@FUZZ
@given(sequence_frames)
def test_a_sequence_frame_of_any_width_is_a_number_or_malformed(frame: bytes) -> None:
    outcome = escapes(
        lambda: decode_message([b"", frame, msgspec.msgpack.encode([0, []])]), MalformedFrame
    )
    assert outcome is None


#: Enough tries for ``find`` to reach a deep payload (it stops at the first).
SEARCH = settings(
    max_examples=5000,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    report_multiple_bugs=False,
)


def _leaky_decode(payload: bytes) -> object:
    """The old decoder's guard: only the msgpack library's own error is expected. It runs
    in a thread of its own, so how deep it may recurse does not depend on the caller's
    stack (the same payload fails every time or never)."""

    def decode() -> None:
        try:
            msgspec.msgpack.decode(payload)
        except msgspec.DecodeError:
            pass
        except Exception as exc:
            escaped.append(exc)

    escaped: list[Exception] = []
    thread = threading.Thread(target=decode)
    thread.start()
    thread.join()
    if escaped:
        raise escaped[0]
    return None


@pytest.mark.parametrize(
    "strategy",
    [hostile_payloads(), hostile_messages().filter(lambda m: len(m) == 3).map(lambda m: m[2])],
)
def test_the_strategies_find_the_crash_a_leaky_decoder_has(
    strategy: st.SearchStrategy[bytes],
) -> None:
    crash = find(
        strategy,
        lambda p: escapes(lambda: _leaky_decode(p), MalformedFrame) is not None,
        settings=SEARCH,
    )
    assert isinstance(escapes(lambda: _leaky_decode(crash), MalformedFrame), RecursionError)
    with pytest.raises(MalformedFrame, match="nests deeper"):
        decode_batch(crash)
