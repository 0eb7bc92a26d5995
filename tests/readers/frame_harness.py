"""One fuzz input to the frame and batch decoders, shared by the coverage-guided campaign
(``.ci/fuzz-frames``, atheris) and the test that replays its seed corpus.

An input's first byte chooses what it is: even, a payload for :func:`decode_batch`; odd,
a three-frame message whose next two bytes give the topic's and the sequence frame's
lengths (the payload is the rest). Either way the frames also go through the monitor's
core. The only outcome allowed besides data is one :class:`MalformedFrame`, counted (or
one malformed message counted by the monitor for a sequence past its bound).
"""

from __future__ import annotations

import contextlib

from kvpool.conformance.bounds import MAX_SEQUENCE_JUMP
from kvpool.conformance.tools.stream.watch import StreamWatch
from kvpool.conformance.tools.stream.wire import MalformedFrame, decode_batch, decode_message


def frames_of(data: bytes) -> list[bytes]:
    """The message an input stands for (see the module docstring)."""
    if len(data) < 3:
        return [data]
    topic_len, sequence_len = data[1], data[2] % 32
    rest = data[3:]
    return [
        rest[:topic_len],
        rest[topic_len : topic_len + sequence_len],
        rest[topic_len + sequence_len :],
    ]


def one_input(data: bytes) -> None:
    """Decode ``data`` (raises only what is not allowed: anything but MalformedFrame)."""
    if not data:
        return
    if data[0] % 2 == 0:
        with contextlib.suppress(MalformedFrame):
            decode_batch(data[1:])
        return
    frames = frames_of(data)
    try:
        # a first sequence no publisher reaches is malformed too (the monitor's bound)
        malformed = int(decode_message(frames).sequence > MAX_SEQUENCE_JUMP)
    except MalformedFrame:
        malformed = 1
    watch = StreamWatch("set", lambda finding: None)
    watch.feed_frames(frames)
    if watch.totals.malformed != malformed:
        raise AssertionError(f"{watch.totals.malformed} malformed counted, {malformed} expected")
