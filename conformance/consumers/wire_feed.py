"""The wire followed for a router written in Python (consumer protocol 2, ``feeds =
"wire"``): each rank's publisher subscribed to, every batch decoded into the pool's events.

A router that reads vLLM's wire itself needs a SUB socket per rank, the frames (topic,
sequence, msgpack batch) decoded and the hashes read as published. :class:`WireFeed` does
that in a thread and hands each batch to the router, in the order received, with its rank
and sequence number; malformed messages are skipped. Hashes arrive as the wire carries
them: vLLM 0.33 publishes the low 64 bits of a hash, read here as 8 big-endian bytes, so a
router compares them with :func:`wire_hash` of the pool's hashes a prompt names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from kvpool.spec.events import Event

from .router import Wire

#: How long the thread waits on one rank's socket before it looks at the next.
POLL_SECONDS = 0.005


def wire_hash(block_hash: bytes) -> bytes:
    """A pool's hash as vLLM's wire carries it (the low 64 bits, as 8 big-endian bytes)."""
    return (int.from_bytes(block_hash, "big") & ((1 << 64) - 1)).to_bytes(8, "big")


class WireFeed:
    """Every rank of ``wire`` followed until :meth:`close`: ``take(events, rank,
    sequence)`` is called from the feed's thread for each batch received."""

    def __init__(self, wire: Wire, take: Callable[[Sequence[Event], int, int], None]) -> None:
        from ..tools.stream.subscriber import Subscriber

        self.take = take
        self.subscribers = [Subscriber([endpoint], "") for endpoint in wire.publishers]
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="kvpool-wire-feed", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from ..tools.stream.watch import spec_events_of
        from ..tools.stream.wire import MalformedFrame, decode_message

        while not self._stop.is_set():
            for rank, subscriber in enumerate(self.subscribers):
                frames = subscriber.receive(POLL_SECONDS)
                if frames is None:
                    continue
                try:
                    message = decode_message(frames)
                except MalformedFrame:
                    continue
                events = [e for wired in message.batch.events for e in spec_events_of(wired)]
                self.take(events, rank, message.sequence)

    def close(self) -> None:
        """Stop the thread, then close every socket."""
        self._stop.set()
        self.thread.join(timeout=5)
        for subscriber in self.subscribers:
            subscriber.close()
