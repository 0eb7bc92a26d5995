"""``kvpool monitor``: a live (or recorded) KV-event stream checked against a consumer
model as it arrives."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click
from kvpool.spec.consumer import EVENT_PROPERTIES
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...bounds import MAX_FRAME_BYTES
from ...consumers.naming import DESCRIPTIONS, parse_consumer
from ...consumers.protocol import ConsumerError
from ...usage import EXIT_FINDING, EXIT_PASS, fail_usage
from .recording import Recorder, RecordingError, read_recording
from .subscriber import EndpointError, Snapshot, Subscriber, rank_endpoint, snapshot_of
from .watch import REORDER_WINDOW, Finding, StreamWatch
from .wire import MalformedFrame, WireBatch, WireMessage, decode_batch, decode_message

LIVE_PREFIXES = ("tcp://", "ipc://", "inproc://")


@click.command()
@click.argument("sources", nargs=-1, required=True, metavar="SOURCE...")
@click.option(
    "--consumer",
    default="count",
    show_default=True,
    metavar="NAME",
    help="Who to judge the stream by: "
    + "; ".join(f"{m}: {d}" for m, d in DESCRIPTIONS.items())
    + "; or a plugin module:factory. A router is asked after every batch about every prefix "
    "the stream named, against the count model beside it (router-recall, router-precision).",
)
@click.option("--topic", default="", show_default=True, help="Subscribe to this topic.")
@click.option(
    "--replay",
    default=None,
    help="The publisher's replay endpoint (rank 0's), e.g. tcp://127.0.0.1:5558: asked for "
    "the history on start and for every gap.",
)
@click.option(
    "--snapshot",
    default=None,
    help="The publisher's snapshot endpoint (newer vLLM), asked for a rank's cache when it "
    "is first heard.",
)
@click.option(
    "--dp-ranks",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Data-parallel ranks behind each tcp SOURCE (rank r at port + r, as vLLM binds).",
)
@click.option(
    "--save",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write every received message to FILE (JSON lines; `kvpool monitor FILE` reads it).",
)
@click.option("--max-events", type=click.IntRange(1), default=None, help="Stop after N events.")
@click.option("--seconds", type=click.FloatRange(0.0), default=None, help="Stop after S seconds.")
@click.option(
    "--idle",
    type=click.FloatRange(0.0),
    default=None,
    help="Stop once nothing has arrived for S seconds (after the first message).",
)
@click.option(
    "--window",
    default=8,
    show_default=True,
    type=click.IntRange(1),
    help="Events of the rank shown before each violation.",
)
@click.option(
    "--reorder-window",
    default=REORDER_WINDOW,
    show_default=True,
    type=click.IntRange(0),
    help="Batches of a rank held back waiting for an earlier one that has not arrived: "
    "a batch out of order is judged in sequence order, and reported as reordered; past "
    "the window the missing batches are a gap (0: a gap at once).",
)
def monitor(
    sources: tuple[str, ...],
    consumer: str,
    topic: str,
    replay: str | None,
    snapshot: str | None,
    dp_ranks: int,
    save: Path | None,
    max_events: int | None,
    seconds: float | None,
    idle: float | None,
    window: int,
    reorder_window: int,
) -> None:
    """Check a KV-event stream against a consumer model as it arrives.

    SOURCE is a vLLM publisher's endpoint (tcp://HOST:PORT, as given to the server's
    --kv-events-config) or a file written by --save. The frames are decoded from vLLM's
    wire format (no vLLM needed): topic, sequence (8 bytes, or 24 with a publisher
    identity), msgpack KVEventBatch. Each event feeds the consumer model; every violation
    of a stream property is printed when it happens, with the events that led to it:

    \b
      events-parent-known   a BlockStored names a parent the consumer holds
      events-removed-known  a BlockRemoved names a hash the consumer holds
      events-replay-index   (set) the set consumer holds what the count consumer holds

    A batch that arrives before one it follows waits in its rank's --reorder-window and
    is judged in sequence order (REORDERED); nothing received is dropped, not even when
    the publisher goes away, and the summary accounts for every message received. Lost
    batches are asked of --replay; what it cannot give is reported as a gap, and the
    rank is re-based from --snapshot when that covers the gap, else not judged until its
    cache is cleared (never judged across the gap). A sequence reset or a new publisher
    identity is a restart (the rank's consumer starts over); each data-parallel rank has
    its own consumer; a malformed frame is counted and reported, and input outside the
    bounds (frame bytes, events, ranks: kvpool.conformance.bounds) is malformed too. A
    status line shows events, batches, keys held and violations.

    \b
    Examples:
      kvpool monitor --replay tcp://127.0.0.1:5558 tcp://127.0.0.1:5557
      kvpool monitor --consumer set --save run.jsonl --seconds 60 tcp://10.0.0.5:5557
      kvpool monitor --consumer set run.jsonl

    Exit 0: no violation; 1: violations; 2: usage or connection error (also when a live
    source sent nothing), or a recorded file with a line that is not a saved message.
    """
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False)
    live = [s for s in sources if s.startswith(LIVE_PREFIXES)]
    files = [s for s in sources if not s.startswith(LIVE_PREFIXES)]
    if live and files:
        fail_usage(err, "give live endpoints or one recorded file, not both")
    if len(files) > 1:
        fail_usage(err, "give one recorded file at a time")
    if files and (save or replay or snapshot):
        fail_usage(err, "--save, --replay and --snapshot apply to live endpoints only")
    try:
        parse_consumer(consumer)
    except ConsumerError as exc:
        fail_usage(err, str(exc))
    watch = StreamWatch(
        consumer,
        lambda f: _print_finding(out, f),
        window=window,
        reorder_window=reorder_window,
    )
    status = _Status(err, watch)
    if files:
        try:
            _read_file(Path(files[0]), watch, status, max_events)
        except RecordingError as exc:
            fail_usage(err, str(exc))
        watch.finish()
    else:
        source = LiveSource(live, topic, replay, snapshot, dp_ranks, save)
        received, resets = _follow(source, watch, status, err, Limits(max_events, seconds, idle))
        watch.finish()
        if not received:
            status.done()
            _summary(out, watch, consumer, resets)
            fail_usage(
                err,
                f"nothing received from {', '.join(live)}: is the publisher running "
                "there, with this --topic?",
            )
    status.done()
    _summary(out, watch, consumer, None if files else resets)
    sys.exit(EXIT_FINDING if watch.totals.violations else EXIT_PASS)


def _expand(sources: list[str], ranks: int) -> list[str]:
    return [rank_endpoint(s, r) for s in sources for r in range(ranks)]


@dataclass(frozen=True)
class LiveSource:
    """Where and how to subscribe (the command's live options)."""

    endpoints: list[str]
    topic: str
    replay: str | None
    snapshot: str | None
    ranks: int
    save: Path | None


@dataclass(frozen=True)
class Limits:
    """When to stop: after so many events, seconds, or idle seconds."""

    max_events: int | None
    seconds: float | None
    idle: float | None


def _follow(
    source: LiveSource, watch: StreamWatch, status: _Status, err: Console, limits: Limits
) -> tuple[bool, int]:
    """Follow live endpoints until a limit; whether anything arrived, and how many times a
    connection dropped and was connected again."""
    replay, snapshot, ranks = source.replay, source.snapshot, source.ranks
    try:
        endpoints = _expand(source.endpoints, ranks)
        subscriber = Subscriber(endpoints, source.topic, replay, snapshot)
    except EndpointError as exc:
        fail_usage(err, str(exc))
    recorder = Recorder(source.save, endpoints) if source.save is not None else None
    err.print(f"monitoring {', '.join(endpoints)}" + (f" (replay {replay})" if replay else ""))

    def record(frames: list[bytes], via: str) -> None:
        if recorder is not None:
            recorder.record(frames, via)

    def fill_gap(rank: int, first: int, last: int) -> list[WireMessage]:
        got: list[WireMessage] = []
        if rank >= ranks:
            return got  # no endpoint was given for this rank: nothing to ask
        for frames in subscriber.replay(rank, first):
            record(frames, "replay")
            try:
                got.append(decode_message(frames))
            except MalformedFrame as exc:
                watch.malformed(str(exc), "replay")
        return got

    def take_snapshot(rank: int) -> tuple[int, bytes, list[WireBatch]] | None:
        if rank >= ranks:
            return None
        answer = subscriber.snapshot(rank)
        if isinstance(answer, str):
            return None
        record(
            [answer.sequence.to_bytes(8, "big", signed=True), answer.publisher, *answer.chunks],
            "snapshot",
        )
        return _snapshot_batches(answer, watch)

    watch.fill_gap = fill_gap if replay else None
    watch.take_snapshot = take_snapshot if snapshot else None
    start = time.monotonic()
    last_message = start
    received = False
    resets = 0
    try:
        if replay:  # the history so far, for a monitor started after the publisher
            for rank in range(ranks):
                for message in fill_gap(rank, 0, -1):
                    received = True
                    watch.totals.replayed += 1
                    watch.feed(message)
        while True:
            now = time.monotonic()
            if limits.seconds is not None and now - start >= limits.seconds:
                break
            if limits.idle is not None and received and now - last_message >= limits.idle:
                break
            if limits.max_events is not None and watch.totals.events >= limits.max_events:
                break
            frames = subscriber.receive(0.1)
            status.show()
            while len(subscriber.resets) > resets:
                _print_reset(err, subscriber.resets[resets])
                resets += 1
            if frames is None:
                continue
            received = True
            last_message = time.monotonic()
            watch.feed_frames(frames)
            record(frames, "live")
    except KeyboardInterrupt:
        pass
    finally:
        resets = len(subscriber.resets)
        subscriber.close()
        if recorder is not None:
            recorder.close()
    return received, resets


def _snapshot_batches(
    answer: Snapshot, watch: StreamWatch
) -> tuple[int, bytes, list[WireBatch]] | None:
    batches = []
    for chunk in answer.chunks:
        try:
            batches.append(decode_batch(chunk))
        except MalformedFrame as exc:
            watch.malformed(f"snapshot chunk: {exc}", "snapshot")
            return None
    return answer.sequence, answer.publisher, batches


def _read_file(path: Path, watch: StreamWatch, status: _Status, max_events: int | None) -> None:
    for entry in read_recording(path):
        if max_events is not None and watch.totals.events >= max_events:
            break
        if entry.via == "snapshot":
            answer = snapshot_of(entry.frames)
            if isinstance(answer, str):
                watch.malformed(answer, "snapshot")
                continue
            got = _snapshot_batches(answer, watch)
            if got is not None:
                rank = next((b.data_parallel_rank or 0 for b in got[2]), 0)
                watch.install_snapshot(rank, *got)
            continue
        watch.feed_frames(entry.frames, entry.via)
        status.show()


#: Each finding's label and its style.
LABELS = {
    "violation": ("VIOLATION", "bold red"),
    "gap": ("GAP", "yellow"),
    "restart": ("RESTART", "cyan"),
    "malformed": ("MALFORMED", "magenta"),
    "reordered": ("REORDERED", "blue"),
}


def _print_finding(console: Console, finding: Finding) -> None:
    """One finding, in one print (a flood of malformed messages is printed as fast as it
    can be); what the stream said is text, never markup."""
    label, style = LABELS[finding.kind]
    lines = [Text.assemble((label, style), " ", finding.message)]
    if finding.window:
        lines.append(
            Text("  events that led to it (the rank's last ones, and every one naming the hash):")
        )
        for seen in finding.window:
            here = " <- here" if seen == finding.at else ""
            lines.append(Text(f"    {seen.line()}{here}"))
    console.print(Text("\n").join(lines))


class _Status:
    """The live status line (on a terminal only, on stderr)."""

    def __init__(self, console: Console, watch: StreamWatch) -> None:
        self.console = console
        self.watch = watch
        self.shown = 0.0

    def show(self) -> None:
        if not self.console.is_terminal or time.monotonic() - self.shown < 0.25:
            return
        self.shown = time.monotonic()
        t = self.watch.totals
        line = (
            f"events {t.events}  batches {t.batches}  keys held {self.watch.keys_held()}  "
            f"violations {t.violations}  gaps {t.gaps}  malformed {t.malformed}"
        )
        self.console.file.write("\r" + line + "\033[K")
        self.console.file.flush()

    def done(self) -> None:
        if self.console.is_terminal:
            self.console.file.write("\r\033[K")
            self.console.file.flush()


def _print_reset(console: Console, endpoint: str) -> None:
    console.print(
        Text.assemble(
            ("RESET", "magenta"),
            f" {endpoint}: the connection dropped (the publisher went away, or sent a frame "
            f"above {MAX_FRAME_BYTES} bytes); connected again",
        )
    )


def _summary(console: Console, watch: StreamWatch, model: str, resets: int | None) -> None:
    t = watch.totals
    table = Table(title=f"kvpool monitor — {model} consumer")
    for column in ("rank", "batches", "keys held", "judged", "publisher"):
        table.add_column(column, justify="right" if column != "publisher" else "left")
    for rank, state in sorted(watch.ranks.items()):
        table.add_row(
            str(rank),
            str(state.next_sequence or 0),
            str(state.consumer.keys_held()),
            "yes" if state.complete else "no (history unknown)",
            state.publisher.hex()[:12] if state.publisher else "-",
        )
    console.print(table)
    console.print(
        f"events {t.events}, batches {t.batches} (heartbeats {t.heartbeats}, replayed "
        f"{t.replayed}, duplicates {t.duplicates}), gaps {t.gaps} ({t.missing_batches} "
        f"batches lost), restarts {t.restarts}, snapshots {t.snapshots}, malformed "
        f"{t.malformed}"
        + ("" if resets is None else f", connection resets {resets}")
        + (f", consumers over the key bound {t.overflows}" if t.overflows else "")
    )
    console.print(
        f"received {t.received} message(s): batches judged {t.judged}, applied unjudged "
        f"(history unknown) {t.batches - t.judged}, reordered {t.reordered}, late (after "
        f"their gap) {t.late}"
    )
    if t.violations:
        for prop, n in sorted(t.properties.items()):
            console.print(
                f"[bold red]{n} violation(s) of {prop}[/bold red]: {EVENT_PROPERTIES[prop]}"
            )
    else:
        console.print(f"[green]no violation[/green] of the {model} consumer's properties")
    if t.unjudged:
        skipped = ", ".join(f"{p} x{n}" for p, n in sorted(t.unjudged.items()))
        console.print(f"not judged (history unknown after a gap): {skipped}")
