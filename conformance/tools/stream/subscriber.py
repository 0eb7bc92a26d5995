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

Every socket keeps the bounds of :mod:`kvpool.conformance.bounds`: no frame above
``MAX_FRAME_BYTES`` is taken in (ZMQ drops the connection that sends one, and does not
connect again by itself: the subscriber does, and counts it in :attr:`Subscriber.resets`),
at most ``MAX_QUEUED_MESSAGES`` live messages wait, a replay answer is cut at
``MAX_REPLAY_MESSAGES``; and an endpoint that did not answer is not asked again for
``SILENT_ENDPOINT_SECONDS``, so a stream that names many ranks or restarts often costs
one wait per endpoint, not one per rank or restart.

Nothing received is dropped by the subscriber itself: when a connection drops, every
message the old socket already holds is read before the socket is replaced, and
:meth:`Subscriber.receive` hands those out first (a publisher that sends its last batches
and closes is heard to the end).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import zmq
from zmq.utils.monitor import recv_monitor_message

from ...bounds import (
    MAX_FRAME_BYTES,
    MAX_QUEUED_MESSAGES,
    MAX_REPLAY_MESSAGES,
    SILENT_ENDPOINT_SECONDS,
)
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


def snapshot_of(frames: list[bytes]) -> Snapshot | str:
    """A snapshot reply's frames (as received, or as saved), or what is wrong with them."""
    if len(frames) < 2 or len(frames[0]) != SEQUENCE_BYTES or len(frames[1]) != IDENTITY_BYTES:
        return "malformed snapshot reply (expected sequence, publisher identity, batches)"
    sequence = int.from_bytes(frames[0], "big", signed=True)
    if sequence == SNAPSHOT_UNAVAILABLE:
        return "the publisher's snapshot is unavailable (-2)"
    if sequence < SNAPSHOT_NONE:
        return f"malformed snapshot sequence {sequence}"
    return Snapshot(sequence, bytes(frames[1]), list(frames[2:]))


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
        self.topic = topic
        #: Endpoints that did not answer, and until when they are not asked again.
        self.silent: dict[str, float] = {}
        #: Each endpoint whose connection dropped, in order (see :meth:`receive`).
        self.resets: list[str] = []
        #: Messages the replaced socket held when its connection dropped, oldest first.
        self._held: deque[list[bytes]] = deque()
        self._subscribe()

    def _subscribe(self) -> None:
        """A SUB socket on every source, and a monitor of its connections dropping."""
        self.sub = self._socket(zmq.SUB)
        self.sub.setsockopt(zmq.RCVHWM, MAX_QUEUED_MESSAGES)
        self.sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode("utf-8"))
        self._events = self.sub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._poller = zmq.Poller()
        self._poller.register(self.sub, zmq.POLLIN)
        self._poller.register(self._events, zmq.POLLIN)
        for source in self.sources:
            self._connect(self.sub, source)

    def _unsubscribe(self) -> None:
        self.sub.disable_monitor()
        self._events.close()
        self.sub.close()

    def _socket(self, kind: int) -> zmq.Socket[bytes]:
        socket: zmq.Socket[bytes] = self.context.socket(kind)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        return socket

    def _asked(self, endpoint: str) -> bool:
        """Whether ``endpoint`` may be asked now (it has not just failed to answer)."""
        return self.silent.get(endpoint, 0.0) <= time.monotonic()

    def _answered(self, endpoint: str, answered: bool) -> None:
        if answered:
            self.silent.pop(endpoint, None)
        else:
            self.silent[endpoint] = time.monotonic() + SILENT_ENDPOINT_SECONDS

    def _connect(self, socket: zmq.Socket[bytes], endpoint: str) -> None:
        try:
            socket.connect(endpoint)
        except zmq.ZMQError as exc:
            raise EndpointError(f"cannot connect to {endpoint}: {exc}") from None

    def receive(self, timeout: float) -> list[bytes] | None:
        """The next live message's frames, or ``None`` after ``timeout`` seconds. A
        connection that dropped (a publisher gone, or a frame above the bound) is
        connected again and recorded in :attr:`resets`; what the socket had received
        before is still handed out, in order."""
        if self._held:
            return self._held.popleft()
        ready = dict(self._poller.poll(max(0, int(timeout * 1000))))
        if self._events in ready:
            self._reconnect()
            return self._held.popleft() if self._held else None
        if self.sub not in ready:
            return None
        return self.sub.recv_multipart()

    def _reconnect(self) -> None:
        """A new SUB socket in place of one whose connection dropped: ZMQ does not connect
        again after a frame above its limit. Every complete message the old socket holds
        is read first (ZMQ delivers a message whole or not at all: a message cut by the
        drop never reaches the socket) and kept for :meth:`receive`; at most what the
        sockets' queues can hold, so a publisher still sending cannot keep this going."""
        dropped = []
        while self._events.poll(0):
            endpoint = recv_monitor_message(self._events)["endpoint"]
            dropped.append(endpoint.decode("utf-8", "replace"))
        self.resets.extend(dropped)
        bound = (MAX_QUEUED_MESSAGES + 1) * max(1, len(self.sources))
        while len(self._held) < bound and self.sub.poll(0):
            try:
                self._held.append(self.sub.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:  # (not expected: ZMQ hands a message's frames out together)
                break
        self._unsubscribe()
        self._subscribe()

    def replay(self, rank: int, first: int) -> list[list[bytes]]:
        """Every buffered message of ``rank`` from sequence ``first`` (frames, undecoded),
        up to the end marker; ``[]`` without a replay endpoint or when it does not answer."""
        if self.replay_endpoint is None:
            return []
        endpoint = rank_endpoint(self.replay_endpoint, rank)
        if not self._asked(endpoint):
            return []
        socket = self._socket(zmq.DEALER)
        try:
            self._connect(socket, endpoint)
            socket.send_multipart([b"", first.to_bytes(SEQUENCE_BYTES, "big")])
            got: list[list[bytes]] = []
            ended = False
            deadline = time.monotonic() + REQUEST_SECONDS
            while (
                len(got) < MAX_REPLAY_MESSAGES
                and (left := deadline - time.monotonic()) > 0
                and socket.poll(int(left * 1000))
            ):
                frames = socket.recv_multipart()
                if frames and frames[0] == b"":
                    frames = frames[1:]  # the delimiter a REQ-style envelope carries
                if len(frames) == 3 and frames[1] == END_OF_REPLAY and not frames[2]:
                    ended = True
                    break
                got.append(frames)
            self._answered(endpoint, ended or bool(got))
            return got
        finally:
            socket.close()

    def snapshot(self, rank: int) -> Snapshot | str:
        """The publisher's snapshot of ``rank``, or why there is none."""
        if self.snapshot_endpoint is None:
            return "no snapshot endpoint"
        endpoint = rank_endpoint(self.snapshot_endpoint, rank)
        if not self._asked(endpoint):
            return f"{endpoint} did not answer lately"
        socket = self._socket(zmq.REQ)
        try:
            self._connect(socket, endpoint)
            socket.send(SNAPSHOT_REQUEST)
            answered = bool(socket.poll(int(REQUEST_SECONDS * 1000)))
            self._answered(endpoint, answered)
            if not answered:
                return f"no snapshot reply within {REQUEST_SECONDS:g} s"
            frames = socket.recv_multipart()
        finally:
            socket.close()
        return snapshot_of(frames)

    def close(self) -> None:
        self._unsubscribe()
        self.context.term()
