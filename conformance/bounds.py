"""The bounds every reader of outside input keeps, in one place.

A frame, a recording, a trace or a vector file comes from outside: a publisher on the
network, a file someone passed around. Each reader turns any input into either data or
one error naming what was wrong, and these bounds are what keeps its time and memory
finite on the way: how many bytes it reads, how deep a value nests, how many items it
takes. They are tool limits, not rules of the pool: a real stream or file stays far
inside each of them (the figures say how far), and one that does not is refused as
malformed, never half-read.

:func:`load_json` is the one bounded JSON reader the file readers share.
"""

from __future__ import annotations

import json
from typing import Any

# --- KV-event frames (conformance/tools/stream/wire.py) ---------------------------------------

#: The largest payload frame decoded (a vLLM batch is a few kilobytes; one storing a
#: 128k-token prompt at once, about 650 kB). Also the socket's per-frame limit, so a
#: larger frame is never buffered.
MAX_FRAME_BYTES = 4 * 1024 * 1024
#: How deep a payload's arrays and maps may nest (a batch, its events, an event, its
#: extra keys, one of them: 5).
MAX_FRAME_NESTING = 16
#: The largest topic frame.
MAX_TOPIC_BYTES = 1024
#: Events in one batch, hashes in one event, token ids in one event, bytes in one hash.
MAX_EVENTS_PER_BATCH = 65_536
MAX_HASHES_PER_EVENT = 65_536
MAX_TOKENS_PER_EVENT = 1 << 20
MAX_HASH_BYTES = 256
#: The highest data-parallel rank a batch may name, and how many ranks one monitor
#: follows at once (each has its own consumer state).
MAX_RANK = 4095
MAX_RANKS = 256

# --- the live monitor (conformance/tools/stream/subscriber.py, watch.py) ----------------------

#: Messages one replay answer may hold (vLLM buffers 10 000 batches by default).
MAX_REPLAY_MESSAGES = 100_000
#: Live messages the subscriber's socket queues before it drops (a drop is then a gap):
#: with :data:`MAX_FRAME_BYTES` this bounds what a fast publisher can make it hold.
MAX_QUEUED_MESSAGES = 64
#: The furthest a rank's sequence may jump forward (or a rank first heard may start): a
#: batch number further on is malformed, not a loss of that many batches (a publisher
#: sending 1000 batches a second takes 50 days to count this far).
MAX_SEQUENCE_JUMP = 1 << 32
#: Keys one rank's consumer may hold (a pool of 4M blocks; a cache of 100 GB of 16-token
#: blocks of a 70B model is about 300k): past it the consumer starts over, unjudged.
MAX_KEYS_PER_RANK = 4 * 1024 * 1024
#: Keys whose events a rank remembers for a violation's window (the oldest go first).
MAX_WINDOW_HASHES = 65_536
#: Seconds a replay or snapshot endpoint that did not answer is not asked again: a stream
#: naming many ranks or restarting often costs one wait per endpoint, not one per rank.
SILENT_ENDPOINT_SECONDS = 30.0

# --- files -------------------------------------------------------------------------------

#: A line of a saved stream (three base64 frames and a little JSON).
MAX_RECORDING_LINE_BYTES = 2 * MAX_FRAME_BYTES
#: A trace or a test-vector file.
MAX_TRACE_BYTES = 20_000_000
#: A ``kvpool route-check`` recording (its curves: a few hundred kilobytes).
MAX_ROUTE_RECORDING_BYTES = MAX_TRACE_BYTES
#: How deep a JSON document may nest (a trace nests about 8 deep).
MAX_JSON_NESTING = 64


# --- the wire protocol (conformance/wire/) -----------------------------------------------

#: The longest line a program may answer with (a reply holds the pool's view: every
#: block's count and keys, so it grows with the pool; the suite's pools have tens of blocks).
MAX_WIRE_LINE_BYTES = 16 * 1024 * 1024
#: How long the suite waits for one reply of a program by default, in seconds (its first
#: reply also waits for the program to start); ``exec,timeout=SECONDS:...`` sets another.
WIRE_REPLY_TIMEOUT = 5.0


# --- engine releases (conformance/targets/releases/) -------------------------------------

#: The largest wheel taken from the package index (vLLM's are ~350-450 MB, LMDeploy's ~110).
MAX_RELEASE_WHEEL_BYTES = 2 * 1024 * 1024 * 1024
#: The largest file kept from a wheel (vLLM's envs.py, the biggest used, is ~120 kB).
MAX_RELEASE_MEMBER_BYTES = 4 * 1024 * 1024
#: How many bytes of the package index's answer about a project's releases are read.
MAX_INDEX_ANSWER_BYTES = 1024 * 1024


# --- the fuzz campaign's example database (conformance/tools/fuzz/sharing.py) ------------------

#: One stored example (a choice sequence: a few kilobytes for our machines' test cases).
MAX_EXAMPLE_BYTES = 1024 * 1024
#: Examples replayed per key (Hypothesis replays a handful; a flooded key costs no more).
MAX_EXAMPLES_PER_KEY = 10_000


class BoundsError(ValueError):
    """Input outside a bound, or not the format at all; the message says which."""


def load_json(data: bytes | str, what: str, max_bytes: int = MAX_TRACE_BYTES) -> Any:
    """The JSON value in ``data`` (UTF-8), at most ``max_bytes`` long and nested at most
    :data:`MAX_JSON_NESTING` deep; :class:`BoundsError` naming ``what`` otherwise."""
    if len(data) > max_bytes:
        raise BoundsError(f"{what} is {len(data)} bytes; at most {max_bytes} are read")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BoundsError(f"{what} is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(data)
    except RecursionError:
        raise BoundsError(f"{what} nests deeper than {MAX_JSON_NESTING} levels") from None
    except ValueError as exc:
        # also a number past Python's int-string limit (4,300 digits): a ValueError
        raise BoundsError(f"{what} is not JSON: {str(exc)[:200]}") from None
    if nesting_exceeds(value, MAX_JSON_NESTING):
        raise BoundsError(f"{what} nests deeper than {MAX_JSON_NESTING} levels")
    return value


#: Kinds of value that hold nothing (what decoders make of numbers, strings and null).
_SCALARS = frozenset({int, float, bool, str, bytes, type(None)})


def nesting_exceeds(value: object, limit: int) -> bool:
    """Whether lists, tuples and dicts in ``value`` nest deeper than ``limit`` (walked
    without recursion, so any depth is measured safely)."""
    containers = (list, tuple, dict)
    level: list[Any] = [value] if isinstance(value, containers) else []
    for _ in range(limit):
        deeper: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            # a list of plain scalars (token ids, hashes) is passed over at C speed
            if not _SCALARS.issuperset(map(type, children)):
                deeper.extend(c for c in children if isinstance(c, containers))
        if not deeper:
            return False
        level = deeper
    return True
