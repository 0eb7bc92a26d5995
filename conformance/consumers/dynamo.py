"""NVIDIA Dynamo's radix-tree index, run in process, as a consumer (``--consumer dynamo``).

``dynamo._core.RadixTree`` (the ``ai-dynamo-runtime`` wheel, the extra ``[dynamo]``) is the
index Dynamo's KV router routes by. It takes events as JSON in its own schema, one worker
at a time, and answers ``find_matches(local_block_hashes)`` with the number of leading
blocks each worker holds. The spec's events are translated into that schema here; the
mapping, stated on the contract page (docs/guide/kv-events-contract.md), is:

- a hash (bytes) becomes Dynamo's 64-bit *external* block hash: an 8-byte hash is read as
  the big-endian integer it is on vLLM's wire; any other length is digested to 8 bytes
  (BLAKE2b), so distinct hashes stay distinct;
- a block's *local* hash (what ``find_matches`` is asked with) comes from Dynamo's own
  ``compute_block_hash_for_seq``, over the block's stand-in tokens: the four 16-bit words
  of its external hash, at a block size of four (the pool's events name no tokens, so
  each distinct hash gets distinct tokens);
- each group of the pool is its own Dynamo worker (worker id ``1 + group``): the schema
  has no group, and keeping groups apart means no finding comes from merging them;
- ``BlockStored`` -> ``{"stored": {"parent_hash", "blocks": [{"block_hash",
  "tokens_hash"}]}}``; ``BlockRemoved`` -> ``{"removed": {"block_hashes": [h]}}``;
  ``AllBlocksCleared`` -> ``"cleared"`` to every worker; ``event_id`` counts up from 1.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kvpool.spec.consumer import EventViolation
from kvpool.spec.events import AllBlocksCleared, BlockRemoved, BlockStored, Event

from ..install import extra_hint
from .protocol import ConsumerError

#: The distribution the extra installs, and the release this mapping was tested on.
PACKAGE = "ai-dynamo-runtime"
TESTED_RELEASE = "1.6.1"
#: Stand-in tokens per block for the local hash (the four 16-bit words of a 64-bit hash).
STAND_IN_BLOCK_SIZE = 4
#: A worker's data-parallel rank in ``find_matches``' scores (one rank per worker here).
DP_RANK = 0


def load_core() -> Any:
    """``dynamo._core``; :class:`ConsumerError` with the install line when it is missing.
    Its log is kept to errors (``DYN_LOG``, unless set): the tree warns on every store it
    skips, and the judge reports what matters."""
    os.environ.setdefault("DYN_LOG", "error")
    try:
        return importlib.import_module("dynamo._core")
    except ImportError as exc:
        raise ConsumerError(
            f"the dynamo consumer needs Dynamo's router core: pip install "
            f"'{PACKAGE}=={TESTED_RELEASE}' (or {extra_hint('dynamo')}): {exc}"
        ) from exc


def external_hash(block_hash: bytes) -> int:
    """Dynamo's 64-bit external block hash for a pool's hash (see the module's mapping)."""
    if len(block_hash) == 8:
        return int.from_bytes(block_hash, "big")
    return int.from_bytes(hashlib.blake2b(block_hash, digest_size=8).digest(), "big")


def worker_of(group_id: int) -> int:
    """The Dynamo worker id a group's blocks are kept under."""
    return 1 + group_id


class DynamoConsumer:
    """A fresh ``RadixTree`` fed one pool's stream; ``held_blocks`` asks ``find_matches``."""

    name = "dynamo"

    def __init__(self) -> None:
        self.core = load_core()
        self.tree = self.core.RadixTree()
        self.event_id = 0
        self.workers: set[int] = set()
        self._local: dict[bytes, int] = {}
        self._pool_hash: dict[int, bytes] = {}
        #: Events the tree refused, by its reason (a store under a parent it lacks, ...).
        self.refused: Counter[str] = Counter()

    # --- the mapping ---------------------------------------------------------------------

    def local_hash(self, block_hash: bytes) -> int:
        """The block's local hash, from Dynamo's own function over its stand-in tokens."""
        cached = self._local.get(block_hash)
        if cached is None:
            external = external_hash(block_hash)
            self._pool_hash[external] = block_hash
            tokens = [(external >> shift) & 0xFFFF for shift in (48, 32, 16, 0)]
            hashed = self.core.compute_block_hash_for_seq(tokens, STAND_IN_BLOCK_SIZE)
            cached = self._local[block_hash] = int(hashed[0])
        return cached

    def translated(self, event: Event) -> list[tuple[int, dict[str, Any]]]:
        """``event`` as ``(worker id, Dynamo event)`` pairs (one per worker for a clear)."""
        if isinstance(event, AllBlocksCleared):
            return [(w, self._event("cleared")) for w in sorted(self.workers)]
        if isinstance(event, BlockRemoved):
            removed = {"block_hashes": [external_hash(event.block_hash)]}
            return [(worker_of(event.group_id), self._event({"removed": removed}))]
        assert isinstance(event, BlockStored)
        blocks = []
        for h in event.block_hashes:
            blocks.append({"block_hash": external_hash(h), "tokens_hash": self.local_hash(h)})
        parent = event.parent_block_hash
        stored = {
            "parent_hash": None if parent is None else external_hash(parent),
            "blocks": blocks,
        }
        return [(worker_of(event.group_id), self._event({"stored": stored}))]

    def _event(self, data: object) -> dict[str, Any]:
        self.event_id += 1
        return {"event_id": self.event_id, "data": data}

    # --- the protocol --------------------------------------------------------------------

    def apply(self, events: Sequence[Event]) -> tuple[EventViolation, ...]:
        for event in events:
            for worker, translated in self.translated(event):
                self.workers.add(worker)
                try:
                    self.tree.apply_event(worker, json.dumps(translated).encode())
                except ValueError as exc:  # the schema refused our translation: our bug
                    raise ConsumerError(
                        f"Dynamo's RadixTree refused the translated event {translated}: {exc}"
                    ) from exc
                except RuntimeError as exc:  # a store it cannot place: skipped, as it says
                    self.refused[str(exc).rsplit(": ", 1)[-1]] += 1
        return ()  # the judge's reference tells the stream's faults

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        if not block_hashes:
            return 0
        scores = self.tree.find_matches([self.local_hash(h) for h in block_hashes]).scores
        return min(int(scores.get((worker_of(group_id), DP_RANK), 0)), len(block_hashes))

    def residency(self) -> Mapping[tuple[int, bytes], int]:
        """What the tree holds, from ``dump_tree_as_events`` (presence: one copy each)."""
        held: dict[tuple[int, bytes], int] = {}
        for line in self.tree.dump_tree_as_events():
            dumped = json.loads(line)
            stored = dumped.get("event", {}).get("data", {})
            if not isinstance(stored, dict) or "stored" not in stored:
                continue
            group = int(dumped["worker_id"]) - 1
            for block in stored["stored"]["blocks"]:
                external = int(block["block_hash"])
                pool_hash = self._pool_hash.get(external, external.to_bytes(8, "big"))
                held[(group, pool_hash)] = 1
        return held
