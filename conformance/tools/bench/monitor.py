"""``kvpool bench --monitor``: how fast the monitor judges a stream with many keys held,
beside NVIDIA Dynamo's radix-tree index fed the same recording.

The recording is written down first, as vLLM 0.33's wire frames (map-tagged events,
64-bit integer hashes, 16 token ids a block, 8-byte sequences): a *setup* part that
stores ``held`` keys (one ``BlockStored`` of 16 blocks per request, 64 events a batch),
then a *timed* part in
steady state: each request stores 4 new blocks after a shared prefix (the first request,
kept) and 4 single-block ``BlockRemoved`` evict the oldest request's blocks, leaf first,
so the keys held stay at ``held``. Every contender starts from nothing in a fresh
process, takes the setup part, then the timed part, timed with the process's CPU time
(one core, the collector off):

- ``monitor, count`` / ``monitor, set``: :class:`~kvpool.conformance.tools.stream.watch.
  StreamWatch` fed the frames, decoding included (the ``set`` model runs with the
  ``count`` model beside it, as ``kvpool monitor --consumer set`` does);
- ``dynamo RadixTree``: ``dynamo._core.RadixTree.apply_event`` on the same events,
  translated beforehand into Dynamo's JSON (:mod:`~kvpool.conformance.consumers.dynamo`'s
  mapping): the index's own work, no decoding.

Memory per held key is the process's resident memory after the setup part less before
it, over ``held`` (what the contender keeps for the keys, with the allocator's slack).
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import random
import resource
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

SCHEMA = "kvpool-bench-monitor/1"
CONTENDERS = ("monitor, count", "monitor, set", "dynamo RadixTree")
BLOCKS_PER_REQUEST = 16
CHURN_BLOCKS = 4
EVENTS_PER_BATCH = 64
#: The aim of issue 37: events per second with 1,000,000 keys held, per consumer model.
AIM_EVENTS_PER_SECOND = 100_000


@dataclass(frozen=True)
class Recording:
    """Wire messages (``[topic, sequence, payload]``): the setup part, then the timed."""

    setup: list[list[bytes]]
    timed: list[list[bytes]]
    timed_events: int


def _stored(hashes: list[int], parent: int | None) -> dict[str, Any]:
    return {
        "type": "BlockStored",
        "block_hashes": list(hashes),  # a copy: the caller pops its list as it evicts
        "parent_block_hash": parent,
        "token_ids": [7] * (16 * len(hashes)),
        "block_size": 16,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "group_idx": 0,
    }


def _removed(block_hash: int) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": [block_hash], "medium": "GPU", "group_idx": 0}


def _batches(events: list[dict[str, Any]], first: int) -> list[list[bytes]]:
    encode = msgspec.msgpack.encode
    return [
        [b"", (first + i).to_bytes(8, "big"), encode([0.0, events[at : at + EVENTS_PER_BATCH], 0])]
        for i, at in enumerate(range(0, len(events), EVENTS_PER_BATCH))
    ]


def recording(held: int, timed_events: int, seed: int) -> Recording:
    """The recording for ``held`` keys and about ``timed_events`` timed events. The first
    request is a shared prefix kept to the end; every request of the timed part continues
    it, and eviction takes the oldest other request, leaf first (a parent never leaves
    before its children, as a pool's LRU order has it)."""
    rng = random.Random(seed)
    hashes: Iterator[int] = iter(rng.sample(range(1, 1 << 63), held + timed_events))
    requests: deque[list[int]] = deque()
    setup: list[dict[str, Any]] = []
    stored = 0
    while stored < held:
        blocks = [next(hashes) for _ in range(min(BLOCKS_PER_REQUEST, held - stored))]
        setup.append(_stored(blocks, None))
        requests.append(blocks)
        stored += len(blocks)
    shared = requests.popleft()
    timed: list[dict[str, Any]] = []
    while len(timed) < timed_events:
        blocks = [next(hashes) for _ in range(CHURN_BLOCKS)]
        timed.append(_stored(blocks, shared[-1]))
        requests.append(blocks)
        for _ in range(CHURN_BLOCKS):
            oldest = requests[0]
            timed.append(_removed(oldest.pop()))
            if not oldest:
                requests.popleft()
    setup_frames = _batches(setup, 0)
    return Recording(setup_frames, _batches(timed, len(setup_frames)), len(timed))


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the peak, in kilobytes
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(contender: str, held: int, timed_events: int, seed: int) -> dict[str, Any]:
    """One contender, in this process: setup part, then the timed part (see the module)."""
    rec = recording(held, timed_events, seed)
    feed, keys = _contender(contender, rec)
    gc.collect()
    gc.disable()
    before = _resident_bytes()
    for _ in feed(True):
        pass
    gc.collect()
    after = _resident_bytes()
    start = time.process_time()
    for _ in feed(False):
        pass
    seconds = time.process_time() - start
    gc.enable()
    return {
        "contender": contender,
        "keys_held": keys(),
        "timed_events": rec.timed_events,
        "seconds": seconds,
        "events_per_second": rec.timed_events / seconds,
        "bytes_per_key": (after - before) / max(held, 1),
    }


def _contender(contender: str, rec: Recording) -> tuple[Any, Any]:
    """``(feed, keys)``: ``feed(setup)`` runs a part, ``keys()`` counts the keys held."""
    if contender.startswith("monitor, "):
        from ..stream.watch import StreamWatch

        found: list[object] = []
        watch = StreamWatch(contender.removeprefix("monitor, "), found.append)

        def feed_watch(setup: bool) -> Iterator[None]:
            for frames in rec.setup if setup else rec.timed:
                watch.feed_frames(frames)
            if found:
                raise AssertionError(f"the recording is not clean: {found[0]}")
            yield None

        return feed_watch, watch.keys_held
    from ...consumers.dynamo import DynamoConsumer
    from ..stream.watch import spec_events_of
    from ..stream.wire import decode_message

    dynamo = DynamoConsumer()

    def translated(part: list[list[bytes]]) -> list[tuple[int, bytes]]:
        out = []
        for frames in part:
            for event in decode_message(frames).batch.events:
                for spec_event in spec_events_of(event):
                    for worker, data in dynamo.translated(spec_event):
                        out.append((worker, json.dumps(data).encode()))
        return out

    setup, timed = translated(rec.setup), translated(rec.timed)
    # a removal of k hashes is k events on the wire here (one hash each): counts agree
    apply = dynamo.tree.apply_event

    def feed_tree(is_setup: bool) -> Iterator[None]:
        for worker, data in setup if is_setup else timed:
            apply(worker, data)
        yield None

    def tree_keys() -> int:
        return sum(
            len(json.loads(line)["event"]["data"]["stored"]["blocks"])
            for line in dynamo.tree.dump_tree_as_events()
        )

    return feed_tree, tree_keys


def dynamo_missing() -> str | None:
    """Why Dynamo's RadixTree cannot be timed here, or ``None`` when it can."""
    from ...consumers.dynamo import load_core
    from ...consumers.protocol import ConsumerError

    try:
        load_core()
    except ConsumerError as exc:
        return str(exc)
    return None


def _child(args: tuple[str, int, int, int]) -> dict[str, Any]:
    return measure(*args)


def run(
    contenders: list[str], sizes: list[int], timed_events: int, repeat: int, seed: int
) -> dict[str, Any]:
    """Every contender at every size, ``repeat`` times, each run in a fresh process."""
    context = multiprocessing.get_context("spawn")
    runs: list[dict[str, Any]] = []
    for held in sizes:
        for _ in range(repeat):
            for contender in contenders:
                with context.Pool(1) as pool:
                    runs.append(pool.apply(_child, ((contender, held, timed_events, seed),)))
    return {"schema": SCHEMA, "seed": seed, "timed_events": timed_events, "runs": runs}


def summary(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (contender, keys held): the median events per second and bytes per key."""
    cells: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in report["runs"]:
        cells.setdefault((r["contender"], r["keys_held"]), []).append(r)
    rows = []
    for (contender, held), runs in sorted(cells.items(), key=lambda c: (c[0][1], c[0][0])):
        rates = sorted(r["events_per_second"] for r in runs)
        memory = sorted(r["bytes_per_key"] for r in runs)
        rows.append(
            {
                "contender": contender,
                "keys_held": held,
                "events_per_second": rates[len(rates) // 2],
                "slowest": rates[0],
                "bytes_per_key": memory[len(memory) // 2],
                "runs": len(runs),
            }
        )
    return rows
