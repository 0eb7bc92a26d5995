"""The monitor's sockets: a SUB socket on the live endpoints, and on request a DEALER on
a rank's replay endpoint or a REQ on its snapshot endpoint.

Replay (every vLLM with a ``replay_endpoint``): the client sends the first wanted sequence
as 8 big-endian bytes; the publisher answers with every buffered batch from there on, each
as ``topic, sequence, payload``, then an end marker (empty topic, sequence -1, empty
payload). Snapshot (newer vLLM with a ``snapshot_endpoint``): the client sends
``snapshot``; the reply is ``sequence`` (signed 8 bytes: the last batch included, -1 for
none yet, -2 for unavailable), the 16-byte publisher identity, then the batches that
rebuild the publisher's current cache. Endpoints of rank r are the rank-0 endpoint with
its TCP port offset by r, as vLLM binds them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import zmq

from .wire import END_OF_REPLAY, IDENTITY_BYTES, SEQUENCE_BYTES

#: How long a replay or snapshot request may take before it is given up.
REQUEST_SECONDS = 2.0
SNAPSHOT_REQUEST = b"snapshot"
SNAPSHOT_NONE, SNAPSHOT_UNAVAILABLE = -1, -2


class EndpointError(ValueError):
    """An endpoint ZMQ cannot connect to; the message names it."""


def rank_endpoint(endpoint: str, rank: int) -> str:
    """``endpoint`` of rank 0 moved to ``rank``: a TCP port offset by the rank."""
    if rank == 0 or not endpoint.startswith("tcp://"):
        return endpoint
    base, _, port = endpoint.rpartition(":")
    if not port.isdigit():
        raise EndpointError(f"{endpoint}: no TCP port to offset for rank {rank}")
    return f"{base}:{int(port) + rank}"


@dataclass(frozen=True)
class Snapshot:
    sequence: int
    publisher: bytes
    chunks: list[bytes]


class Subscriber:
    """Live messages from ``sources``; replays and snapshots on request."""

    def __init__(
        self,
        sources: list[str],
        topic: str,
        replay: str | None = None,
        snapshot: str | None = None,
    ) -> None:
        self.context = zmq.Context()
        self.sources = sources
        self.replay_endpoint = replay
        self.snapshot_endpoint = snapshot
        self.sub = self.context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
        for source in sources:
            self._connect(self.sub, source)

    def _connect(self, socket: zmq.Socket[bytes], endpoint: str) -> None:
        try:
            socket.connect(endpoint)
        except zmq.ZMQError as exc:
            raise EndpointError(f"cannot connect to {endpoint}: {exc}") from None

    def receive(self, timeout: float) -> list[bytes] | None:
        """The next live message's frames, or ``None`` after ``timeout`` seconds."""
        if not self.sub.poll(max(0, int(timeout * 1000))):
            return None
        return self.sub.recv_multipart()

    def replay(self, rank: int, first: int) -> list[list[bytes]]:
        """Every buffered message of ``rank`` from sequence ``first`` (frames, undecoded),
        up to the end marker; ``[]`` without a replay endpoint or when it does not answer."""
        if self.replay_endpoint is None:
            return []
        socket = self.context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        try:
            self._connect(socket, rank_endpoint(self.replay_endpoint, rank))
            socket.send_multipart([b"", first.to_bytes(SEQUENCE_BYTES, "big")])
            got: list[list[bytes]] = []
            deadline = time.monotonic() + REQUEST_SECONDS
            while (left := deadline - time.monotonic()) > 0 and socket.poll(int(left * 1000)):
                frames = socket.recv_multipart()
                if frames and frames[0] == b"":
                    frames = frames[1:]  # the delimiter a REQ-style envelope carries
                if len(frames) == 3 and frames[1] == END_OF_REPLAY and not frames[2]:
                    break
                got.append(frames)
            return got
        finally:
            socket.close()

    def snapshot(self, rank: int) -> Snapshot | str:
        """The publisher's snapshot of ``rank``, or why there is none."""
        if self.snapshot_endpoint is None:
            return "no snapshot endpoint"
        socket = self.context.socket(zmq.REQ)
        socket.setsockopt(zmq.LINGER, 0)
        try:
            self._connect(socket, rank_endpoint(self.snapshot_endpoint, rank))
            socket.send(SNAPSHOT_REQUEST)
            if not socket.poll(int(REQUEST_SECONDS * 1000)):
                return f"no snapshot reply within {REQUEST_SECONDS:g} s"
            frames = socket.recv_multipart()
        finally:
            socket.close()
        if len(frames) < 2 or len(frames[0]) != SEQUENCE_BYTES or len(frames[1]) != IDENTITY_BYTES:
            return "malformed snapshot reply (expected sequence, publisher identity, batches)"
        sequence = int.from_bytes(frames[0], "big", signed=True)
        if sequence == SNAPSHOT_UNAVAILABLE:
            return "the publisher's snapshot is unavailable (-2)"
        if sequence < SNAPSHOT_NONE:
            return f"malformed snapshot sequence {sequence}"
        return Snapshot(sequence, bytes(frames[1]), list(frames[2:]))

    def close(self) -> None:
        self.sub.close()
        self.context.term()
