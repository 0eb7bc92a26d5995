"""Watching a KV-event stream: messages in, consumer state kept, findings out.

One :class:`StreamWatch` follows every data-parallel rank it hears from (each rank is its
own publisher, with its own sequence and its own consumer state). For each message it
checks the sequence first:

- the next number: the batch is applied, and after it any later batches that were held
  back waiting for it (see the reorder window below);
- a number already seen: a duplicate (a replay overlapping live data), skipped;
- a jump forward: held back in the rank's **reorder window** (``reorder_window`` batches,
  ``kvpool monitor --reorder-window``): a batch that arrives out of order is judged in
  sequence order once the ones before it arrive, and reported as *reordered*. Once more
  batches wait than the window holds (or the stream ends: :meth:`StreamWatch.finish`),
  what lies before the oldest of them is a **gap**. The caller's ``fill_gap`` (the replay
  socket) is asked for the missing batches (of this publisher lifetime only); those it
  returns in order are applied first. What stays missing is reported as a gap, never as a
  violation: the consumer is re-based from the publisher's snapshot when
  ``take_snapshot`` offers one that reaches the batch before the live one; otherwise the
  consumer may lack hashes stored in the gap, so the stream-only properties are not
  judged on that rank (counted as *unjudged*) until the history is known again (an
  ``AllBlocksCleared``, or a restart);
- a number lower than the last one, or a new publisher identity: a **restart**. The
  engine came back with an empty cache: the rank's consumer starts over, from the new
  lifetime's snapshot when there is one, and the sequence is checked for a gap after it
  just as for a rank first heard.

A rank first heard at a sequence above 0 (a monitor started late) is likewise unjudged
until its history is known; ``fill_gap`` is asked for the batches from 0 first. A batch
that arrives after its gap was reported (later than the window allows) is counted as
*late* and not judged: it would be applied out of order. A jump forward by more than
``max_jump`` batches (:data:`~kvpool.conformance.bounds.MAX_SEQUENCE_JUMP`; a first-heard
sequence above it likewise) is no plausible loss: the message is malformed.

Every batch received is accounted for in :class:`Totals`: applied (judged, or not judged
while the rank's history is unknown), a duplicate, late, or malformed; and every batch
never received is counted in a gap.

Each event is fed to the consumer model of :mod:`kvpool.spec.consumer` (``count`` or
``set``), kept in place (:mod:`~kvpool.conformance.consumers.incremental`: the spec's
rules at a cost per event that does not grow with the keys held). A ``set`` consumer runs
beside a ``count`` consumer, the contract vLLM documents, so that a hash the set consumer
loses while copies remain is reported (``events-replay-index``) when it happens. A router
(``--consumer dynamo``, or a plugin) is judged by the one judge of streams
(:class:`~kvpool.conformance.consumers.judge.StreamJudge`): it is fed the GPU pool's
events of its rank (the medium a router routes by), and after every batch it is asked
about every prefix the stream has named, against the count model beside it
(``router-recall``, ``router-precision``). Every violation carries the window of events
that led to it: the last events of its rank and every event that named its hash.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import NamedTuple

from kvpool.spec import events as spec_events
from kvpool.spec.consumer import CONSUMER_MODELS, EventViolation, new_consumer

from ...bounds import MAX_KEYS_PER_RANK, MAX_RANKS, MAX_SEQUENCE_JUMP, MAX_WINDOW_HASHES
from ...consumers.incremental import IncrementalConsumer, SetBesideCount
from ...consumers.judge import StreamJudge
from ...consumers.naming import make_consumer
from .wire import MalformedFrame, WireBatch, WireEvent, WireMessage, decode_message

#: How many of a rank's last events a violation shows, and how many per hash.
WINDOW = 8
HASH_HISTORY = 6
#: How many applied batches a rank remembers to recognise a duplicate.
RECENT = 1024
#: How many of a rank's gaps are remembered, to tell a late batch from a restart.
LOST_RANGES = 64
#: Batches ``kvpool monitor`` holds back per rank waiting for one that arrives late.
REORDER_WINDOW = 32
#: The medium an ``AllBlocksCleared`` resets (the GPU block pool's), and the unnamed one.
CLEARED_MEDIA = ("GPU", None)

#: Fetches batches ``first`` .. ``last`` (inclusive) of a rank; those it could get.
GapFiller = Callable[[int, int, int], list[WireMessage]]
#: Fetches a rank's snapshot: ``(sequence, publisher identity, batches)``, or ``None``.
SnapshotTaker = Callable[[int], tuple[int, bytes, list[WireBatch]] | None]


class Seen(NamedTuple):
    """One event as the window shows it."""

    rank: int
    sequence: int
    #: The event's place in its batch.
    position: int
    event: WireEvent

    @property
    def text(self) -> str:
        return self.event.describe()

    def line(self) -> str:
        return f"rank {self.rank} seq {self.sequence} #{self.position}: {self.text}"


@dataclass(frozen=True)
class Finding:
    """What the monitor reports: a violation (with its window), a gap, a restart or a
    malformed frame."""

    kind: str  # "violation", "gap", "restart", "malformed", "reordered"
    rank: int | None
    sequence: int | None
    message: str
    property: str | None = None
    window: tuple[Seen, ...] = ()
    #: The event that showed the violation (in ``window``).
    at: Seen | None = None


@dataclass
class RankState:
    """One publisher (one data-parallel rank) as the monitor follows it."""

    rank: int
    model: str
    #: The rank's consumer: a ``count`` one, or a ``set`` one beside a ``count`` one.
    consumer: IncrementalConsumer | SetBesideCount
    publisher: bytes | None = None
    next_sequence: int | None = None
    #: Whether every event since the last empty state was seen (violations are judged).
    complete: bool = True
    window: deque[Seen] = field(default_factory=lambda: deque(maxlen=WINDOW))
    #: (An ordered dict: the oldest is dropped in constant time; a plain dict's first
    #: entry is found by walking past every one deleted before it.)
    history: OrderedDict[tuple[int, bytes], list[Seen]] = field(default_factory=OrderedDict)
    #: Differences with the count consumer already reported (not repeated while they last).
    open_differences: set[tuple[str, int | None, bytes | None]] = field(default_factory=set)
    #: The last batches applied, by sequence (to tell a duplicate from a restart).
    recent: OrderedDict[int, WireBatch] = field(default_factory=OrderedDict)
    #: Batches past a missing one, held back until it arrives (by sequence).
    pending: dict[int, WireMessage] = field(default_factory=dict)
    #: The last gaps reported, ``(first, last)`` sequences (to recognise a late batch).
    lost: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=LOST_RANGES))
    #: The router judged on this rank (``None`` for a model consumer), made when the rank's
    #: first batch is applied (a restart starts a fresh one).
    router: StreamJudge | None = None


def _fresh(
    rank: int, model: str, publisher: bytes | None, complete: bool, window: int = WINDOW
) -> RankState:
    return RankState(
        window=deque(maxlen=window),
        rank=rank,
        model=model,
        consumer=_consumer(model),
        publisher=publisher,
        complete=complete,
    )


def _consumer(model: str) -> IncrementalConsumer | SetBesideCount:
    return SetBesideCount() if model == "set" else IncrementalConsumer(model)


def spec_events_of(event: WireEvent) -> list[spec_events.Event]:
    """A wire event in the spec's vocabulary (a removal of k hashes becomes k events)."""
    group = event.group_idx or 0
    if event.kind == "BlockStored":
        return [
            spec_events.BlockStored(
                event.block_hashes,
                event.parent_block_hash,
                group,
                event.block_size,
                len(event.token_ids),
            )
        ]
    if event.kind == "BlockRemoved":
        return [spec_events.BlockRemoved(h, group) for h in event.block_hashes]
    return [spec_events.AllBlocksCleared()]


@dataclass
class Totals:
    #: Messages handed to the watch (live, recorded, or replayed at the start).
    received: int = 0
    events: int = 0
    #: Batches applied (received or replayed), of which ``judged`` on a rank whose
    #: history was known; the others were applied unjudged.
    batches: int = 0
    judged: int = 0
    heartbeats: int = 0
    duplicates: int = 0
    #: Batches that arrived out of order and were judged in sequence order.
    reordered: int = 0
    #: Batches that arrived after their gap was reported: counted, not applied.
    late: int = 0
    #: Batches still held back for a missing one (0 after :meth:`StreamWatch.finish`).
    held_back: int = 0
    malformed: int = 0
    gaps: int = 0
    missing_batches: int = 0
    replayed: int = 0
    restarts: int = 0
    snapshots: int = 0
    #: Times a rank's consumer held more keys than the bound and started over.
    overflows: int = 0
    violations: int = 0
    #: Violations not judged because the rank's history was incomplete (by property).
    unjudged: Counter[str] = field(default_factory=Counter)
    properties: Counter[str] = field(default_factory=Counter)


class StreamWatch:
    """The monitor's state over every rank; :meth:`feed` one message at a time."""

    def __init__(
        self,
        model: str,
        report: Callable[[Finding], None],
        fill_gap: GapFiller | None = None,
        take_snapshot: SnapshotTaker | None = None,
        window: int = WINDOW,
        max_ranks: int = MAX_RANKS,
        max_keys: int = MAX_KEYS_PER_RANK,
        reorder_window: int = 0,
        max_jump: int = MAX_SEQUENCE_JUMP,
    ) -> None:
        #: A router is judged beside the count model (its reference); a model on its own.
        self.router_name: str | None = None
        if model not in CONSUMER_MODELS:
            make_consumer(model)  # ConsumerError for an unknown one, before anything runs
            self.router_name, model = model, "count"
        new_consumer(model)  # ValueError for an unknown model, before anything runs
        self.model = model
        self.max_ranks = max_ranks
        self.max_keys = max_keys
        self.report = report
        self.fill_gap = fill_gap
        self.take_snapshot = take_snapshot
        self.window = window
        #: Batches held back per rank for a missing one (0: a jump is a gap at once).
        self.reorder_window = reorder_window
        self.max_jump = max_jump
        self.ranks: dict[int, RankState] = {}
        self.totals = Totals()

    # --- what the status line shows ----------------------------------------------------

    def keys_held(self) -> int:
        return sum(r.consumer.keys_held() for r in self.ranks.values())

    # --- input -------------------------------------------------------------------------

    def feed_frames(self, frames: list[bytes], via: str = "live") -> None:
        """One received multipart message; a malformed one is counted and reported."""
        try:
            message = decode_message(frames)
        except MalformedFrame as exc:
            self.totals.received += 1
            self.malformed(str(exc), via)
            return
        self.feed(message, via)

    def malformed(self, reason: str, via: str = "live") -> None:
        self.totals.malformed += 1
        self.report(Finding("malformed", None, None, f"malformed {via} message: {reason}"))

    def _followed(self, rank: int, via: str) -> bool:
        """Whether ``rank`` is followed: known already, or a new one within the bound (a
        message of a rank beyond it is counted as malformed, and costs nothing more)."""
        if rank in self.ranks or len(self.ranks) < self.max_ranks:
            return True
        self.malformed(
            f"rank {rank} refused: this monitor follows at most {self.max_ranks} ranks", via
        )
        return False

    def feed(self, message: WireMessage, via: str = "live") -> None:
        """One decoded message: its sequence checked first (see the module docstring),
        then its batch applied in sequence order, never across a gap."""
        self.totals.received += 1
        rank = message.batch.data_parallel_rank or 0
        seq = message.sequence
        if not self._followed(rank, via) or not self._plausible(message, via):
            return
        state = self.ranks.get(rank)
        #: Whether the rank's state was just built (from a snapshot, or from nothing).
        fresh = state is None
        if state is None:
            state = self._first(rank, message)
        if state.publisher is not None and message.publisher != state.publisher:
            state, fresh = self._restart(state, message, "a new publisher identity"), True
        elif state.next_sequence is not None and seq < state.next_sequence and not fresh:
            if self._late(state, message):
                return
            same_lifetime = message.publisher is not None  # (and the same identity)
            if same_lifetime or state.recent.get(seq) == message.batch:
                self.totals.duplicates += 1  # seen already: live after a replay or snapshot
                return
            state, fresh = self._restart(state, message, f"sequence back to {seq}"), True
        if state.next_sequence is not None and seq > state.next_sequence:
            if not fresh and self.reorder_window:
                self._hold_back(state, message)
                return
            state = self._gap(state, message, rebase=not fresh)
        if state.next_sequence is not None and seq < state.next_sequence:
            self.totals.duplicates += 1  # the snapshot the rank was built from holds it
            return
        if state.pending:
            self.totals.reordered += 1
            self.report(
                Finding(
                    "reordered",
                    rank,
                    seq,
                    f"rank {rank}: batch {seq} arrived after batch(es) "
                    f"{_ranges(sorted(state.pending))}; judged in sequence order",
                )
            )
        self._apply(state, message)
        self._release(state)

    def finish(self) -> None:
        """The stream ended: batches still held back for a missing one are judged, what
        is missing before them reported as gaps."""
        for rank in sorted(self.ranks):
            self._settle(self.ranks[rank])

    def _plausible(self, message: WireMessage, via: str) -> bool:
        """Whether ``message``'s sequence is a plausible next one for its rank: no further
        than ``max_jump`` past the next expected (past 0 for a rank first heard, or heard
        from a new publisher). Else it is malformed, and changes nothing."""
        state = self.ranks.get(message.batch.data_parallel_rank or 0)
        base = 0
        if state is not None and message.publisher == state.publisher:
            base = state.next_sequence or 0
        if message.sequence - base <= self.max_jump:
            return True
        self.malformed(
            f"sequence {message.sequence} of rank {message.batch.data_parallel_rank or 0} "
            f"is {message.sequence - base} batches past the next expected ({base}); no "
            f"publisher loses more than {self.max_jump}",
            via,
        )
        return False

    # --- the reorder window -------------------------------------------------------------

    def _hold_back(self, state: RankState, message: WireMessage) -> None:
        """``message`` arrived before a batch it follows: it waits in the rank's window;
        when the window is full, the oldest waiting batch waits no longer."""
        if message.sequence in state.pending:
            self.totals.duplicates += 1
            return
        state.pending[message.sequence] = message
        self.totals.held_back += 1
        if len(state.pending) > self.reorder_window:
            self._give_up_waiting(state)

    def _release(self, state: RankState) -> None:
        """The held-back batches that now follow on, applied in order."""
        state = self.ranks[state.rank]
        while state.next_sequence in state.pending:
            message = state.pending.pop(state.next_sequence)
            self.totals.held_back -= 1
            self._apply(state, message)

    def _give_up_waiting(self, state: RankState) -> None:
        """The oldest held-back batch is taken as the next one: what lies before it is a
        gap (asked of the replay first), and the batches that follow on are applied."""
        first = min(state.pending)
        message = state.pending.pop(first)
        self.totals.held_back -= 1
        state = self._gap(state, message, rebase=True)
        if state.next_sequence is not None and first < state.next_sequence:
            self.totals.duplicates += 1  # the snapshot that filled the gap holds it
        else:
            self._apply(state, message)
        self._release(state)

    def _settle(self, state: RankState) -> None:
        """Every batch held back on ``state``'s rank judged (before a restart, or at the
        end of the stream)."""
        while state.pending:
            self._give_up_waiting(state)
            state = self.ranks[state.rank]

    def _late(self, state: RankState, message: WireMessage) -> bool:
        """Whether ``message`` is a batch already reported lost in a gap of this lifetime,
        arriving late (then it is counted and reported, not applied out of order)."""
        seq = message.sequence
        if not any(first <= seq <= last for first, last in state.lost):
            return False
        self.totals.late += 1
        self.report(
            Finding(
                "reordered",
                state.rank,
                seq,
                f"rank {state.rank}: batch {seq} arrived after its gap was reported (later "
                f"than the reorder window of {self.reorder_window} batch(es) allows); not "
                "applied out of order, it stays counted as lost",
            )
        )
        return True

    def _first(self, rank: int, message: WireMessage) -> RankState:
        """A rank's state when it is first heard: from its snapshot if it offers one, else
        from its replayed history (see :meth:`_late_start`)."""
        snapshot = self.take_snapshot(rank) if self.take_snapshot is not None else None
        if snapshot is not None:
            self.install_snapshot(rank, *snapshot)
            return self.ranks[rank]
        state = self.ranks[rank] = _fresh(rank, self.model, message.publisher, True, self.window)
        if message.sequence > 0:
            self._late_start(state, message.sequence)
        return state

    def install_snapshot(
        self, rank: int, sequence: int, publisher: bytes, batches: list[WireBatch]
    ) -> None:
        """Start ``rank`` over from a snapshot: its batches rebuild the cache (they are
        not judged: a snapshot may store evicted ancestors and then remove them), and the
        live stream continues after ``sequence``."""
        if not self._followed(rank, "snapshot"):
            return
        state = _fresh(rank, self.model, publisher, False, self.window)
        before = self.ranks.get(rank)
        if before is not None and before.publisher == publisher:  # still waiting: kept
            state.pending = {s: m for s, m in before.pending.items() if s > sequence}
            self.totals.duplicates += len(before.pending) - len(state.pending)
            self.totals.held_back -= len(before.pending) - len(state.pending)
        self.ranks[rank] = state
        for batch in batches:
            self._apply_batch(state, WireMessage(b"", max(sequence, 0), publisher, batch))
        state.window.clear()
        state.history.clear()
        state.open_differences = set()
        if isinstance(state.consumer, SetBesideCount):  # what differs in it is not news
            state.open_differences = state.consumer.reported_now()
        state.complete = True
        state.next_sequence = sequence + 1
        state.publisher = publisher
        self.totals.snapshots += 1

    # --- sequence events ----------------------------------------------------------------

    def _late_start(self, state: RankState, seq: int) -> None:
        """A rank first heard at ``seq`` > 0 (after a restart, or a monitor started late):
        batches 0 .. seq-1 are asked for; the rank is judged only if all of them come."""
        got = self._fetch(state.rank, 0, seq - 1, state.publisher)
        have = 0
        if got and got[0].sequence == 0:
            for m in got:
                if m.sequence != have:
                    break
                self._apply(state, m)
                have += 1
        if have == seq:
            return
        state.complete = False
        state.next_sequence = seq
        # (not in ``lost``: what came before a rank was first heard does not arrive late,
        # and a batch 0 after it is the next lifetime's, a restart)
        self.totals.gaps += 1
        self.totals.missing_batches += seq - have
        self.report(
            Finding(
                "gap",
                state.rank,
                seq,
                f"rank {state.rank}: first heard at sequence {seq}; batches {have}..{seq - 1} "
                "could not be replayed: its earlier stores are unknown, so the stream "
                "properties are not judged on this rank until its cache is cleared",
            )
        )

    def _gap(self, state: RankState, message: WireMessage, rebase: bool) -> RankState:
        """Batches ``state.next_sequence`` .. ``message.sequence - 1`` were not heard.
        Those the replay returns in order are applied; if some stay missing, it is a gap:
        reported, and the rank is re-based from the publisher's snapshot when it offers
        one that covers the gap (``rebase``: not asked again right after the rank was
        built from one), else not judged until its cache is cleared. Never is the next
        batch judged against a consumer that lacks the gap. The rank's state after it."""
        assert state.next_sequence is not None
        first, last = state.next_sequence, message.sequence - 1
        got = self._fetch(state.rank, first, last, message.publisher)
        for m in got:
            if m.sequence != state.next_sequence:
                break
            self._apply(state, m)
        if state.next_sequence > last:
            return state
        after = [m for m in got if m.sequence > state.next_sequence]  # replayed past a hole
        heard = {m.sequence for m in after}
        lost_from, lost_to = state.next_sequence, last
        while lost_to in heard:
            lost_to -= 1
        missing = last - lost_from + 1 - len(heard)
        state.lost.append((lost_from, lost_to))
        self.totals.gaps += 1
        self.totals.missing_batches += missing
        what = f"rank {state.rank}: {missing} batch(es) lost (sequence {lost_from}..{lost_to})"
        snapshot = self._covering_snapshot(state.rank, message) if rebase else None
        if snapshot is not None:
            self.report(
                Finding(
                    "gap",
                    state.rank,
                    lost_from,
                    f"{what}; the consumer is re-based from the publisher's snapshot at "
                    f"sequence {snapshot[0]}",
                )
            )
            self.install_snapshot(state.rank, *snapshot)
            self.ranks[state.rank].lost.append((lost_from, lost_to))
            return self.ranks[state.rank]
        state.complete = False
        self.report(
            Finding(
                "gap",
                state.rank,
                lost_from,
                f"{what}; the stream properties are not judged on this rank until its "
                "cache is cleared",
            )
        )
        for m in after:  # what came after the hole still tells the consumer what is stored
            self._apply(state, m)
        state.next_sequence = last + 1
        return state

    def _covering_snapshot(
        self, rank: int, message: WireMessage
    ) -> tuple[int, bytes, list[WireBatch]] | None:
        """The publisher's snapshot of ``rank`` if it is of ``message``'s publisher
        lifetime and reaches at least the batch before it (so it covers the gap)."""
        if self.take_snapshot is None or message.publisher is None:
            return None
        snapshot = self.take_snapshot(rank)
        if snapshot is None or snapshot[1] != message.publisher:
            return None
        return snapshot if snapshot[0] >= message.sequence - 1 else None

    def _fetch(
        self, rank: int, first: int, last: int, publisher: bytes | None
    ) -> list[WireMessage]:
        """Batches ``first`` .. ``last`` of ``rank`` the replay returns, of ``publisher``'s
        lifetime only (a replay buffer may still hold an earlier lifetime's)."""
        if self.fill_gap is None or last < first:
            return []
        got = [
            m
            for m in self.fill_gap(rank, first, last)
            if first <= m.sequence <= last and m.publisher == publisher
        ]
        self.totals.replayed += len(got)
        return sorted(got, key=lambda m: m.sequence)

    def _restart(self, state: RankState, message: WireMessage, why: str) -> RankState:
        self._settle(state)  # the old lifetime's batches that were waiting, judged first
        state = self.ranks[state.rank]
        self.totals.restarts += 1
        self.report(
            Finding(
                "restart",
                state.rank,
                message.sequence,
                f"rank {state.rank}: publisher restarted ({why}); its consumer starts over "
                f"from an empty cache ({state.consumer.keys_held()} keys dropped)",
            )
        )
        del self.ranks[state.rank]
        return self._first(state.rank, message)

    # --- events -------------------------------------------------------------------------

    def _apply(self, state: RankState, message: WireMessage) -> None:
        state.next_sequence = message.sequence + 1
        state.publisher = message.publisher
        state.recent[message.sequence] = message.batch
        if len(state.recent) > RECENT:
            state.recent.popitem(last=False)  # the oldest
        self.totals.batches += 1
        self.totals.judged += state.complete
        if message.batch.heartbeat:
            self.totals.heartbeats += 1
        self._apply_batch(state, message)
        if state.consumer.keys_held() > self.max_keys:
            self._overflow(state, message.sequence)

    def _overflow(self, state: RankState, sequence: int) -> None:
        """A rank holds more keys than the monitor keeps (its memory bound): its consumer
        starts over from empty, and is not judged until the rank's cache is cleared (it
        now lacks what was stored, just as after a gap)."""
        self.totals.overflows += 1
        self.report(
            Finding(
                "gap",
                state.rank,
                sequence,
                f"rank {state.rank}: holds more than {self.max_keys} keys, the most this "
                "monitor keeps for one rank; its consumer starts over from empty, and the "
                "stream properties are not judged on this rank until its cache is cleared",
            )
        )
        state.consumer = _consumer(self.model)
        state.history.clear()
        state.open_differences.clear()
        state.complete = False

    def _apply_batch(self, state: RankState, message: WireMessage) -> None:
        """Every event of ``message`` in order: remembered for the windows, applied to the
        rank's consumer (and its router), its violations reported. The loop every event
        of a busy stream takes: what it looks up is looked up once per batch."""
        if self.router_name is not None and state.router is None:
            state.router = StreamJudge(self.router_name)
        seen: Seen | None = None
        history, remember = state.history, state.window.append
        router, rank, sequence = state.router, state.rank, message.sequence
        events = message.batch.events
        self.totals.events += len(events)
        apply, reported = state.consumer.apply, state.open_differences
        for index, event in enumerate(events):
            seen = Seen(rank, sequence, index, event)
            remember(seen)
            group = event.group_idx or 0
            named_hashes: Collection[bytes] = event.block_hashes
            if event.parent_block_hash is not None or len(named_hashes) > 1:
                named_hashes = {*named_hashes, *filter(None, [event.parent_block_hash])}
            for h in named_hashes:
                named = history.get((group, h))
                if named is None:
                    history[(group, h)] = [seen]
                else:
                    named.append(seen)
                    if len(named) > HASH_HISTORY:
                        del named[0]
            while len(history) > MAX_WINDOW_HASHES:
                history.popitem(last=False)  # the longest remembered
            for spec_event in spec_events_of(event):
                if event.kind == "AllBlocksCleared":
                    self._clear(state, spec_event)  # (reported is emptied in place)
                else:  # (a set consumer's differences from the count one come at removals)
                    found = apply(spec_event, event.medium, reported)
                    if found:
                        self._found(state, found, seen)
                if router is not None and event.medium in CLEARED_MEDIA:
                    router.feed((spec_event,), None)
        if router is not None and seen is not None:
            self._judge_router(state, router, seen)

    def _judge_router(self, state: RankState, router: StreamJudge, seen: Seen) -> None:
        """After a batch: the router asked about every prefix, against the count model
        beside it; a difference is reported once while it lasts."""
        now = router.routes(router.model.held_blocks)
        keys = {(v.property, v.group_id, v.block_hash) for v in now}
        router_open = {k for k in state.open_differences if k[0].startswith("router-")}
        state.open_differences = (state.open_differences - router_open) | keys
        for violation in now:
            if (violation.property, violation.group_id, violation.block_hash) in router_open:
                continue
            if not state.complete:
                self.totals.unjudged[violation.property] += 1
                continue
            self._violation(state, violation, seen)

    def _clear(self, state: RankState, event: spec_events.Event) -> None:
        """An ``AllBlocksCleared``: every consumer of the rank empties the media it names,
        and the rank's history is known again (an empty cache)."""
        for m in CLEARED_MEDIA:
            state.consumer.apply(event, m, state.open_differences)
        state.history.clear()
        state.open_differences.clear()
        state.complete = True

    def _found(self, state: RankState, found: list[EventViolation], seen: Seen) -> None:
        for violation in found:
            if not state.complete:
                self.totals.unjudged[violation.property] += 1
                continue
            self._violation(state, violation, seen)

    def _violation(self, state: RankState, violation: EventViolation, seen: Seen) -> None:
        self.totals.violations += 1
        self.totals.properties[violation.property] += 1
        window = list(state.window)
        if violation.block_hash is not None and violation.group_id is not None:
            named = state.history.get((violation.group_id, violation.block_hash), ())
            window = sorted({*window, *named}, key=lambda s: (s.sequence, s.position))
        self.report(
            Finding(
                "violation",
                state.rank,
                seen.sequence,
                f"rank {state.rank} seq {seen.sequence}: {violation}",
                violation.property,
                tuple(window),
                seen,
            )
        )


def _ranges(sequences: list[int]) -> str:
    """Sorted sequence numbers as ranges, e.g. ``4..6, 9``."""
    spans: list[list[int]] = []
    for seq in sequences:
        if spans and spans[-1][1] == seq - 1:
            spans[-1][1] = seq
        else:
            spans.append([seq, seq])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in spans)
