"""An engine's recorded KV-event stream (the monitor's recording format), cut into the
windows of its requests.

A message belongs to the latest request sent before it was received (the recording's
``started`` plus its ``t``, against the log's ``sent``): the engine runs one request at a
time, so the events received before the next request is sent are those of the requests
so far. A log without ``sent`` times is judged once, after its last request. Only live
messages are read (a replayed one repeats a live one); a message that does not decode or a
gap in a publisher's sequence numbers is a problem of the stream.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

from kvpool.spec.files import UnreadableFile, open_regular_file

from ...bounds import MAX_RECORDING_LINE_BYTES, BoundsError, load_json
from ..stream.recording import FORMAT, RecordingError, read_recording
from ..stream.wire import MalformedFrame, WireEvent, decode_message
from .ledger import Ledger
from .request_log import RequestLog


@dataclass
class Window:
    """The events received while one request was the latest sent."""

    events: list[WireEvent] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def started_at(path: Path) -> float:
    """The recording's ``started`` (Unix seconds)."""
    try:
        with open_regular_file(path, "recording") as lines:
            header = load_json(lines.readline(MAX_RECORDING_LINE_BYTES + 1), f"{path} line 1")
    except (UnreadableFile, BoundsError) as exc:
        raise RecordingError(str(exc)) from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordingError(
            f"{path} line 1: not a saved KV-event stream (expected a header with "
            f'"format": "{FORMAT}", as kvpool monitor --save writes)'
        )
    started = header.get("started")
    if isinstance(started, bool) or not isinstance(started, int | float):
        raise RecordingError(f"{path} line 1: the header has no 'started' time")
    return float(started)


def windows(path: Path, log: RequestLog) -> tuple[list[Window], bool]:
    """One window per request (the events after its ``sent`` and before the next's), and
    whether the log had the times to cut them (else every event is in the last)."""
    sent = [r.sent for r in log.requests]
    timed = all(t is not None for t in sent)
    cuts: list[float] = [t for t in sent if t is not None] if timed else []
    started = started_at(path)
    out = [Window() for _ in log.requests]
    last_seq: dict[tuple[int | None, bytes | None], int] = {}
    for recorded in read_recording(path):
        if recorded.via != "live":
            continue
        at = started + recorded.t
        index = max(0, bisect.bisect_right(cuts, at) - 1) if timed else len(out) - 1
        window = out[index]
        try:
            message = decode_message(recorded.frames)
        except MalformedFrame as exc:
            window.problems.append(f"a message that does not decode: {exc}")
            continue
        source = (message.batch.data_parallel_rank, message.publisher)
        before = last_seq.get(source)
        if before is not None and message.sequence != before + 1:
            window.problems.append(
                f"batches {before + 1}..{message.sequence - 1} are missing from the recording"
            )
        last_seq[source] = message.sequence
        window.events.extend(message.batch.events)
    return out, timed


def feed(ledger: Ledger, events: list[WireEvent], block_size: int) -> None:
    """An engine's events into ``ledger`` (its token ids cut into blocks of ``block_size``)."""
    for event in events:
        group = event.group_idx or 0
        if event.kind == "BlockStored":
            tokens = event.token_ids
            size = event.block_size or block_size
            chunks = None
            if len(tokens) == size * len(event.block_hashes):
                chunks = [tokens[i * size : (i + 1) * size] for i in range(len(event.block_hashes))]
            ledger.stored(group, event.block_hashes, event.parent_block_hash, chunks)
        elif event.kind == "BlockRemoved":
            for block_hash in event.block_hashes:
                ledger.removed(group, block_hash)
        else:
            ledger.cleared()
