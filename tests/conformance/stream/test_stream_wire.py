"""The wire decoder: vLLM's frames decoded without vLLM; anything else a MalformedFrame."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvpool.conformance.bounds import (
    MAX_EVENTS_PER_BATCH,
    MAX_FRAME_BYTES,
    MAX_FRAME_NESTING,
    MAX_HASH_BYTES,
    MAX_HASHES_PER_EVENT,
    MAX_RANK,
    MAX_TOKENS_PER_EVENT,
    MAX_TOPIC_BYTES,
)
from kvpool.conformance.tools.stream.wire import (
    MalformedFrame,
    decode_batch,
    decode_message,
    hash_bytes,
)
from wire_frames import CLEARED, message, payload, removed, stored  # the folder is on sys.path


def test_map_tagged_events_of_vllm_033_decode() -> None:
    frames = message(7, [stored([b"h1", b"h2"], b"p0", group=1), removed([b"h1"]), CLEARED])
    got = decode_message(frames)
    assert got.sequence == 7 and got.publisher is None and got.topic == b""
    s, r, c = got.batch.events
    assert (s.kind, s.block_hashes, s.parent_block_hash, s.group_idx) == (
        "BlockStored",
        (b"h1", b"h2"),
        b"p0",
        1,
    )
    assert s.token_ids == (1, 1, 1, 1) and s.medium == "GPU"
    assert (r.kind, r.block_hashes) == ("BlockRemoved", (b"h1",))
    assert c.kind == "AllBlocksCleared"


def test_array_tagged_events_and_integer_hashes_decode() -> None:
    raw = [
        ["BlockStored", [5, 6], None, [1, 2, 3, 4], 2, None, "GPU"],
        ["BlockRemoved", [5], "GPU", 0],
        ["AllBlocksCleared"],
    ]
    batch = decode_batch(msgspec.msgpack.encode([2.5, raw]))
    assert batch.data_parallel_rank is None
    s, r, c = batch.events
    assert s.block_hashes == (hash_bytes(5, ""), hash_bytes(6, "")) and s.group_idx is None
    assert r.block_hashes == ((5).to_bytes(8, "big"),) and r.group_idx == 0
    assert c.kind == "AllBlocksCleared"


def test_24_byte_sequence_carries_the_publisher_identity() -> None:
    got = decode_message(message(3, [], publisher=b"I" * 16))
    assert (got.sequence, got.publisher, got.batch.heartbeat) == (3, b"I" * 16, True)


@pytest.mark.parametrize(
    ("frames", "says"),
    [
        ([b"", b"\0" * 8], "2 frames"),
        ([b"", b"\0" * 5, payload([])], "sequence frame of 5 bytes"),
        ([b"", b"\0" * 8, b"\xc1"], "not msgpack"),
        ([b"", b"\0" * 8, payload([])[:-1]], "not msgpack"),
        ([b"", b"\0" * 8, msgspec.msgpack.encode({"ts": 1})], "not a batch array"),
        ([b"", b"\0" * 8, payload([{"type": "BlockMoved"}])], "unknown type 'BlockMoved'"),
        ([b"", b"\0" * 8, payload([{"type": "BlockRemoved"}])], "block_hashes is missing"),
        ([b"", b"\0" * 8, payload([removed([1.5])])], "block hash is float"),
        ([b"", b"\0" * 8, payload([removed([True])])], "block hash is bool"),
        ([b"", b"\0" * 8, payload([], rank=-1)], "data_parallel_rank -1"),
        ([b"", b"\0" * 8, payload([{**stored([b"a"]), "token_ids": "ab"}])], "token_ids"),
        (
            [b"", b"\0" * 8, b"\x91" * 200_000 + b"\x00"],
            f"nests deeper than {MAX_FRAME_NESTING} levels",
        ),
        ([b"", b"\0" * 8, b"\x00" * (MAX_FRAME_BYTES + 1)], f"at most {MAX_FRAME_BYTES}"),
        ([b"t" * (MAX_TOPIC_BYTES + 1), b"\0" * 8, payload([])], "topic frame of"),
        ([b"", b"\0" * 8, payload([removed([b"h" * (MAX_HASH_BYTES + 1)])])], "block hash of"),
        ([b"", b"\0" * 8, payload([], rank=MAX_RANK + 1)], f"is not a rank \\(0..{MAX_RANK}"),
        ([b"", b"\0" * 8, payload([0] * (MAX_EVENTS_PER_BATCH + 1))], "events in a batch"),
        ([b"", b"\0" * 8, payload([removed([1] * (MAX_HASHES_PER_EVENT + 1))])], "block hashes"),
        (
            [
                b"",
                b"\0" * 8,
                payload([{**stored([b"a"]), "token_ids": [0] * (MAX_TOKENS_PER_EVENT + 1)}]),
            ],
            "token ids \\(at most",
        ),
    ],
)
def test_malformed_frames_are_named(frames: list[bytes], says: str) -> None:
    with pytest.raises(MalformedFrame, match=says):
        decode_message(frames)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 400), st.binary(max_size=8))
def test_any_truncation_or_garbage_is_a_malformed_frame_never_a_crash(
    cut: int, junk: bytes
) -> None:
    good = payload([stored([b"a" * 32, 7], b"p"), removed([b"a" * 32]), CLEARED])
    for data in (good[:cut], good[:cut] + junk, junk):
        with contextlib.suppress(MalformedFrame):
            decode_message([b"", b"\0" * 8, data])


def _nested(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_is_bounded_at_the_bound_not_at_the_stack() -> None:
    """A batch nests 3 deep before an event's fields: a field nested to the bound decodes
    (it is ignored), one level more is refused, at any call depth."""

    def batch(depth: int) -> bytes:
        event = {**stored([b"a"]), "extra_keys": _nested(depth - 3)}
        return payload([event])

    assert decode_batch(batch(MAX_FRAME_NESTING)).events[0].block_hashes == (b"a",)
    with pytest.raises(MalformedFrame, match=f"nests deeper than {MAX_FRAME_NESTING} levels"):
        decode_batch(batch(MAX_FRAME_NESTING + 1))
