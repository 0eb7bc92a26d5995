"""A router that reads the wire, judged at the events level (``--consumer vllm-router``).

The events level feeds a consumer one pool's events and asks it about the prefixes they
name (:mod:`.judge`). A router that reads the wire and is asked with prompts is put there
through :class:`OnTheWire`, a protocol 1 consumer: each step's events go out as one batch
through vLLM's own publisher (:data:`~..stream.publisher.DEFAULT_RELEASE`'s
``ZmqEventPublisher``, on loopback), the suite waits on the router's watermark, and a
prefix is asked as a prompt.

The pool's events name hashes, not tokens; each block is given stand-in tokens
(``block_size`` of them, from a digest of its group and hash), sent in its
``BlockStored.token_ids`` and in the prompts it is asked about, so the router hashes the
same tokens both ways. A prompt carries one token past its whole blocks (a router, as
vLLM, never serves a prompt's last token from cache).

The router and the publisher are started once per run and block size (:func:`session`,
at a case's first store) and closed at exit; each test case starts with an
``AllBlocksCleared`` on the stream (a router that declares ``resets = "new-worker"`` is
closed and started again instead). A router that declares ``groups = (0,)`` is asked
about group 0 only: its lookups are token-only and name one group (vllm-router 0.1.17
asks ``group_idx: 0``). A case that publishes a store of another block size than its
first (a router takes one block size, ``--kv-event-block-size``) asks the router nothing
from that step on.
"""

from __future__ import annotations

import atexit
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from kvpool.spec.events import AllBlocksCleared, BlockRemoved, BlockStored, Event

from .protocol import ConsumerError
from .router import Prompt, Router, Wire, hook, resets

#: How long the suite waits for the router to apply (or refuse) a batch.
PATIENCE = 3.0
#: How long a router that reports no watermark is given to join the stream.
JOIN_SECONDS = 0.5
#: The token a prompt carries past its whole blocks.
PAST_LAST = 1
_sessions: dict[tuple[str, int], _Session] = {}


def stand_in(group: int, block_hash: bytes, block_size: int) -> tuple[int, ...]:
    """A block's stand-in tokens: distinct blocks get distinct tokens (16-bit words of a
    digest of its group and hash)."""
    digest = hashlib.blake2b(
        bytes([group & 0xFF]) + block_hash, digest_size=2 * block_size
    ).digest()
    return tuple(2 + int.from_bytes(digest[i : i + 2], "big") for i in range(0, len(digest), 2))


class _Session:
    """One publisher and one router for a whole run."""

    def __init__(self, make: Callable[[], Router], block_size: int) -> None:
        from ..tools.routes.indexer import free_port
        from ..tools.stream.publisher import DEFAULT_RELEASE, load_publisher, start_publisher

        self.make = make
        self.release = load_publisher(DEFAULT_RELEASE)
        self.convert = self.release.kv_cache_utils.maybe_convert_block_hash
        port, replay = free_port(), free_port()
        self.publisher: Any = start_publisher(
            self.release, f"tcp://*:{port}", f"tcp://*:{replay}", "", bind="127.0.0.1"
        )
        self.wire = Wire((f"tcp://127.0.0.1:{port}",), (f"tcp://127.0.0.1:{replay}",), block_size)
        self.router: Router | None = None
        self.published = 0
        self._start()

    def _start(self) -> None:
        self.router = self.make()
        hook(self.router, "start", lambda wire: None)(self.wire)
        self._joined()

    def _joined(self) -> None:
        """Wait until the router's subscription is live: a SUB socket misses what is
        published before it has joined (ZMQ's slow joiner), so an ``AllBlocksCleared``
        is published until the router's watermark shows one applied."""
        applied = getattr(self.router, "applied", None)
        if applied is None:
            time.sleep(JOIN_SECONDS)
            return
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            self._send([AllBlocksCleared()])
            waited = time.monotonic() + 0.1
            while time.monotonic() < waited:
                if applied().get(0, -1) >= self.published - 1:
                    return
                time.sleep(0.005)
        raise ConsumerError(f"the router applied no batch within {PATIENCE:g} s of its start")

    def reset(self) -> None:
        """A new test case: the router emptied through the stream (or started anew)."""
        assert self.router is not None
        if resets(self.router) == "new-worker":
            hook(self.router, "close", lambda: None)()
            self._start()
            return
        self.publish([AllBlocksCleared()])

    def publish(self, events: Sequence[Event]) -> None:
        """One batch of the release's classes, then the router's watermark waited on."""
        self._send(events)
        self._wait(self.published - 1)

    def _send(self, events: Sequence[Event]) -> None:
        """One batch of the release's classes, published."""
        m = self.release.kv_events
        out = []
        for event in events:
            if isinstance(event, BlockStored):
                tokens = [
                    t
                    for h in event.block_hashes
                    for t in stand_in(event.group_id, h, event.block_size)
                ]
                parent = event.parent_block_hash
                out.append(
                    m.BlockStored(
                        block_hashes=[self.convert(h) for h in event.block_hashes],
                        parent_block_hash=None if parent is None else self.convert(parent),
                        token_ids=tokens,
                        block_size=event.block_size,
                        lora_id=None,
                        medium="GPU",
                        lora_name=None,
                        group_idx=event.group_id,
                    )
                )
            elif isinstance(event, BlockRemoved):
                out.append(
                    m.BlockRemoved(
                        block_hashes=[self.convert(event.block_hash)],
                        medium="GPU",
                        group_idx=event.group_id,
                    )
                )
            else:
                out.append(m.AllBlocksCleared())
        self.publisher.publish(m.KVEventBatch(ts=time.time(), events=out))
        self.published += 1

    def _wait(self, seq: int) -> None:
        applied = getattr(self.router, "applied", None)
        if applied is None:
            return
        deadline = time.monotonic() + PATIENCE
        while applied().get(0, -1) < seq:
            if time.monotonic() > deadline:
                raise ConsumerError(
                    f"the router did not apply batch {seq} within {PATIENCE:g} s, nor say it "
                    "refused it: its watermark cannot be trusted"
                )
            time.sleep(0.002)

    def close(self) -> None:
        if self.router is not None:
            hook(self.router, "close", lambda: None)()
            self.router = None
        self.publisher.shutdown()


def session(name: str, make: Callable[[], Router], block_size: int) -> _Session:
    """The run's session for router ``name`` at ``block_size``, started on first use."""
    key = (name, block_size)
    if key not in _sessions:
        _sessions[key] = _Session(make, block_size)
        atexit.register(_sessions[key].close)
    return _sessions[key]


class OnTheWire:
    """A wire router as a protocol 1 consumer of one test case's stream."""

    def __init__(self, name: str, make: Callable[[], Router]) -> None:
        self.name = name
        self.make = make
        #: Started at the case's first store, whose block size the router is told.
        self.session: _Session | None = None
        #: The groups it is asked about (``None``: every group; none after a store of
        #: another block size).
        self.groups: tuple[int, ...] | None = None
        #: Steps that published a store of another block size than the router's.
        self.out_of_contract = 0

    def apply(self, events: Sequence[Event]) -> tuple[()]:
        if self.session is None:
            stores = [e for e in events if isinstance(e, BlockStored)]
            if not stores:
                return ()  # nothing published yet: the router holds nothing, as told
            self.session = session(self.name, self.make, stores[0].block_size)
            self.session.reset()
            self.groups = getattr(self.session.router, "groups", None)
        size = self.session.wire.block_size
        if any(isinstance(e, BlockStored) and e.block_size != size for e in events):
            # a store of another block size than the router was started with is outside
            # what it takes (one block size): from here on the case asks it nothing
            self.groups = ()
            self.out_of_contract += 1
        self.session.publish(events)
        return ()

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        if not block_hashes or self.session is None:
            return 0
        router = self.session.router
        if router is None:
            raise ConsumerError(f"the {self.name} router was closed")
        tokens = [
            t for h in block_hashes for t in stand_in(group_id, h, self.session.wire.block_size)
        ]
        prompt = Prompt((*tokens, PAST_LAST), tuple(block_hashes), group_id)
        return min(int(router.credited(prompt).get(0, 0)), len(block_hashes))

    def residency(self) -> None:
        return None
