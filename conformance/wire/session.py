"""One conversation with a program: the handshake, then one action per message.

Every message the suite sends has a ``type`` and an ``id``; every reply names the message
it answers (``in_reply_to``) and has the reply type of that message. The first message of
a pool is ``init`` (the newest protocol version the suite speaks, the pool's config and
the profile it is judged by); the program answers ``init_ok`` with the version it speaks
(1 or 2: the suite then speaks that one), its name, the operations it offers, what it
shows and its profile. Then each ``apply`` carries one action and is answered by
``applied``: the outcome and the pool's view after it. Under protocol 2 a ``batch``
carries several actions (a sequence the suite knows in advance) and is answered by
``applied_batch``, one step per action, and a view may leave out the fields that did not
change since the view before (:class:`~.codec.ViewReader`). A program that cannot go on
answers ``error`` with a text. Anything else is a :class:`~.child.WireError` naming the
message, and the program is ended: the session is then broken, and every later message
raises the same error.

A batch may be posted before its reply is wanted (:meth:`Session.post_batch`, then
:meth:`Session.collect_batch`): the program computes it while the suite judges the steps
before it, or reads it while the suite reads the ``init`` before it. Replies are read in
the order the messages were sent; an ``init`` first reads (and checks) the replies of
those still waiting, then drops them: their steps were a pool that is left.

The next pools of a run of several (a replay of many traces) may be started ahead too
(:meth:`Session.start_ahead`: each one's ``init`` and first batch, :attr:`Session.upcoming`),
sent once the pool before them has nothing more to send: the program computes them while
the suite judges the pools before. An ``init`` of the same config, profile and first
actions then takes its pool (those started before it are dropped); a pool that needs its
program again (a rebuild) drops them all: their replies are read and dropped by the next
``init``, and each pool is started again when it comes.
"""

from __future__ import annotations

import atexit
import json
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kvpool.spec import Action, Observation, PoolConfig

from ..machines.pool.target import FINE_EVENT_HASHES, OBSERVABLES, PoolView
from ..machines.requests.target import RequestSetup
from ..trace.itf import ItfError, Json, encode
from .child import BatchUnanswered, Child, ProgramGone, WireError
from .codec import (
    Refusal,
    ViewReader,
    decode_outcome,
    decode_returned,
    encode_action,
    optional_arguments,
    pool_actions,
)

T = TypeVar("T")
#: The newest protocol version this suite speaks.
PROTOCOL = 2
#: The versions a program may answer with: 1 (one action per message, whole views) and 2.
PROTOCOLS = (1, 2)
#: The first version with ``batch`` messages and views holding only their changes.
BATCHES = 2
#: Each message type the suite sends, with the type of its reply.
REPLIES = {"init": "init_ok", "apply": "applied", "batch": "applied_batch", "call": "returned"}
#: A program's answer to any message when it cannot go on.
ERROR = "error"
#: The most actions one batch carries (a longer plan goes in several, one after another).
BATCH_ACTIONS = 32
#: At most this many bytes of messages the program has not answered are sent before their
#: replies are read (the smallest pipe buffer of the common systems: a write then never
#: waits).
PIPE_ROOM = 16 * 1024


@dataclass(frozen=True)
class Hello:
    """What a program says of itself in ``init_ok``."""

    name: str
    profile: str
    operations: frozenset[str]
    observes: frozenset[str]
    #: The protocol version the program speaks (one of :data:`PROTOCOLS`).
    protocol: int = PROTOCOL


@dataclass(frozen=True)
class Posted:
    """A message sent whose reply is read later: its id, type, what it carries and how
    many actions (a batch's)."""

    id: int
    kind: str
    what: str
    count: int = 1

    @property
    def named(self) -> str:
        """How errors name it: ``message N (what)``."""
        return f"message {self.id} ({self.what})"


#: A pool to start ahead: its config, profile and first actions.
Ahead = tuple[PoolConfig | RequestSetup, str | None, tuple[Action, ...]]


@dataclass(frozen=True)
class Upcoming:
    """A pool started ahead (:meth:`Session.start_ahead`): what it was started with (its
    config, profile and first actions), its ``init`` and its first batch with the batch's
    actions."""

    started: Ahead
    init: Posted
    batch: tuple[Posted, list[Action]]


@dataclass(frozen=True)
class Step:
    """A program's ``applied`` reply: the outcome, the view after it, and the structure
    problems it reports (where it shows ``structure``)."""

    #: An ``applied`` reply's observation, a ``returned`` reply's result, or a refusal.
    outcome: Observation | Refusal | Any
    view: PoolView
    problems: tuple[str, ...]


class Session:
    """A running program and the messages exchanged with it."""

    def __init__(self, command: tuple[str, ...], timeout: float) -> None:
        self.command = command
        self.timeout = timeout
        self.child: Child | None = None
        #: The process that started the child (a forked copy of this session starts its own).
        self.owner = os.getpid()
        self.broken: WireError | None = None
        self.next_id = 0
        #: Bumped by every ``init``: a target built before the latest one is stale.
        self.generation = 0
        self.views = ViewReader()
        #: The version the program answered its latest ``init`` with.
        self.protocol = 1
        #: The messages sent whose replies are not collected yet, oldest first.
        self.waiting: deque[Posted] = deque()
        #: Replies read before they were collected (:meth:`make_room`), by message id.
        self.early: dict[int, bytes] = {}
        #: The length of each message sent whose reply is not read yet, by id.
        self.sizes: dict[int, int] = {}
        #: The batch sent with the latest ``init`` (see :meth:`init`), and its actions.
        self.first: tuple[Posted, list[Action]] | None = None
        #: Whether the program is sent one action a message (see :meth:`restart`).
        self.one_by_one = False
        #: The next pools, started ahead (:meth:`start_ahead`) and not yet taken, in order.
        self.upcoming: deque[Upcoming] = deque()

    def init(
        self,
        config: PoolConfig | RequestSetup,
        profile: str | None,
        offerable: frozenset[str] | None = None,
        first: Sequence[Action] = (),
    ) -> tuple[Hello, PoolView]:
        """Start a fresh pool (a ``PoolConfig``) or manager (a ``RequestSetup``) in the
        program, the program itself on the first call: what the program says of itself
        (its ``operations`` some of ``offerable``, by default the pool's), and the view of
        the new pool. When the program took batches at its last ``init``, the ``first``
        actions of the new pool (up to :data:`BATCH_ACTIONS`) are sent in a batch right
        after this ``init``, before its reply is read: :attr:`first` holds it."""
        self.leave_parents()  # a forked copy takes none of its parent's pools
        upcoming, started = self.upcoming, (config, profile, tuple(first))
        while upcoming and upcoming[0].started != started:
            upcoming.popleft()  # its replies are read (and dropped) below
        if upcoming and self.drop_before(upcoming[0].init):
            ahead = upcoming.popleft()
            posted, self.first = ahead.init, ahead.batch
        else:
            upcoming.clear()
            self.drop_before(_NOTHING)  # the pools before are left
            body = {"protocol": PROTOCOL, "config": encode(config, type(config))}
            posted = self.post("init", {**body, "profile": profile}, "init")
            early = list(first[:BATCH_ACTIONS]) if self.batches and first else []
            self.first = (self.post_batch(early), early) if early else None
        reply = self.collect(posted)
        self.generation += 1
        allowed = pool_offers() if offerable is None else offerable
        said = self.read(reply, "init", lambda r: hello(r, allowed))
        self.protocol = said.protocol
        return said, self.read(reply, "init", self.initial_view)

    def start_ahead(self, pools: Sequence[Ahead]) -> None:
        """Send the ``init`` of each of the next ``pools`` (in the order they come) and its
        first actions, in a batch, now, before the pools before them are judged: the
        :attr:`upcoming` pools, each taken by the :meth:`init` of the same. Those started
        already are not sent again; nothing is sent when the program does not take
        batches, when those started are not the first of ``pools`` (a pool dropped: the
        order would break), and from a pool whose first actions are none or more than one
        batch holds (the rest of its actions would come after the pools started after
        it). After it, the pool before sends nothing more (:attr:`upcoming` says so)."""
        started = [ahead.started for ahead in self.upcoming]
        if not self.batches or list(pools[: len(started)]) != started:
            return
        for config, profile, first in pools[len(started) :]:
            if not 0 < len(first) <= BATCH_ACTIONS:
                return
            body = {"config": encode(config, type(config)), "profile": profile}
            posted = self.post("init", {"protocol": PROTOCOL, **body}, "init")
            batch = (self.post_batch(first), list(first))
            self.upcoming.append(Upcoming((config, profile, first), posted, batch))

    def drop_before(self, posted: Posted) -> bool:
        """Read (and drop) the replies of the messages sent before ``posted``: whether
        ``posted`` is still waiting (not if the program answered nothing to a batch, on
        actions the suite did not need, and was started again)."""
        while self.waiting and self.waiting[0] is not posted:
            try:
                self.collect(self.waiting[0])
            except ProgramGone:  # on actions the suite did not need: they never happened
                self.restart()
        return bool(self.waiting)

    @property
    def batches(self) -> bool:
        """Whether the program is sent ``batch`` messages: it speaks protocol 2, and it
        never went without answering one (:meth:`restart`)."""
        return self.protocol >= BATCHES and not self.one_by_one

    def restart(self) -> None:
        """After the program answered nothing to a batch (it exited, or gave no reply in
        time) that held actions the suite may not need: start it again, to be sent one
        action a message from then on, so that what it does is told of the very action
        that does it, and only of actions the suite needs."""
        assert self.child is not None
        self.child.close()
        self.child = None
        self.broken = None
        self.waiting.clear()
        self.one_by_one = True
        self.early.clear()
        self.sizes.clear()
        self.upcoming.clear()

    def check(self, generation: int) -> None:
        """Raise why the pool or manager of ``generation`` can no longer be used: the
        program broke the protocol, or a later ``init`` replaced it."""
        if self.broken is not None:
            raise self.broken
        if generation != self.generation:
            raise WireError(
                f"pool {generation} of program {' '.join(self.command)!r} was used after pool "
                f"{self.generation} was started in it (one pool per program at a time)"
            )

    def apply(self, action: Action) -> Step:
        """Send one action; the program's outcome and view after it."""
        what = f"apply {action.operation}"
        reply = self.exchange("apply", {"action": encode_action(action)}, what)
        return self.read(reply, what, self.step)

    def batch(self, actions: Sequence[Action]) -> list[Step]:
        """Send several actions in one ``batch`` (protocol 2); the program's outcome and
        view after each, in order."""
        return self.collect_batch(self.post_batch(actions))

    def post_batch(self, actions: Sequence[Action]) -> Posted:
        """Send several actions in one ``batch`` (protocol 2) without waiting for the
        reply, which :meth:`collect_batch` reads."""
        what = f"batch of {len(actions)} actions"
        body: dict[str, Json] = {"actions": [encode_action(a) for a in actions]}
        return self.post("batch", body, what, len(actions))

    def collect_batch(self, posted: Posted) -> list[Step]:
        """The steps of the batch ``posted``, read from its reply."""
        reply = self.collect(posted)
        return self.read(reply, posted.what, lambda r: self.steps(r, posted.count), posted.id)

    def call(self, method: str, arguments: dict[str, Json], hints: dict[str, Any]) -> Step:
        """Call a manager's ``method`` with ``arguments`` (ITF values); the program's
        outcome (the result, of type ``hints["return"]``) and its pool's view after it."""
        what = f"call {method}"
        reply = self.exchange("call", {"method": method, "arguments": arguments}, what)
        return self.read(reply, what, lambda r: self.step(r, hints["return"]))

    def exchange(self, kind: str, body: dict[str, Json], what: str) -> dict[str, Any]:
        """Send one message, return its reply (checked: JSON, a record, the right type
        and ``in_reply_to``)."""
        return self.collect(self.post(kind, body, what))

    def post(self, kind: str, body: dict[str, Json], what: str, count: int = 1) -> Posted:
        """Send one message; its reply is read by :meth:`collect`, after those of the
        messages sent before it."""
        if self.broken is not None:
            raise self.broken
        self.leave_parents()
        if self.child is None:
            self.child = Child(self.command, self.timeout)
            self.owner = os.getpid()
            SESSIONS.add(self)
        self.next_id += 1
        posted = Posted(self.next_id, kind, what, count)
        try:
            self.child.send({"type": kind, "id": posted.id, **body}, posted.named, self.make_room)
        except WireError as exc:
            self.broken = _of_batch(exc, posted)
            raise self.broken from None
        self.waiting.append(posted)
        return posted

    def leave_parents(self) -> None:
        """In a forked copy of this session: forget the program, which is its parent's
        (the next message starts one of our own)."""
        if self.child is not None and self.owner != os.getpid():
            self.child = None
            self.waiting.clear()
            self.early.clear()
            self.sizes.clear()
            self.upcoming.clear()

    def make_room(self, size: int) -> None:
        """Before a line of ``size`` bytes is sent: read the replies of messages sent
        before (kept for :meth:`collect`) while the program's input could hold more than
        :data:`PIPE_ROOM` bytes of messages it has not answered, so that the suite never
        waits to write while the program waits to write a reply nobody reads."""
        self.sizes[self.next_id] = size
        assert self.child is not None
        for posted in self.waiting:
            if sum(self.sizes.values()) <= PIPE_ROOM:
                return
            if posted.id in self.early:
                continue
            try:
                self.early[posted.id] = self.child.receive(posted.named)
            except WireError as exc:
                self.broken = _of_batch(exc, posted)
                raise self.broken from None
            self.sizes.pop(posted.id, None)

    def collect(self, posted: Posted) -> dict[str, Any]:
        """The reply to ``posted`` (checked: JSON, a record, the right type and
        ``in_reply_to``)."""
        if self.broken is not None:
            raise self.broken
        assert self.child is not None and self.waiting[0] is posted
        self.waiting.popleft()
        message_id, kind, what = posted.id, posted.kind, posted.named
        self.sizes.pop(message_id, None)
        try:
            line = self.early.pop(message_id, None)
            if line is None:
                line = self.child.receive(what)
            try:  # the line's length is bounded by the child; its nesting by the decoders
                reply = json.loads(line.decode())
            except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
                raise self.fail(
                    f"the reply to {what} is not JSON ({exc}): {_quote(line)}"
                ) from None
            if not isinstance(reply, dict):
                raise self.fail(f"the reply to {what} is not a JSON object: {_quote(line)}")
            if reply.get("type") == ERROR:
                raise self.fail(f"the program answered {what} with an error: {reply.get('text')!r}")
            if reply.get("in_reply_to") != message_id:
                raise self.fail(
                    f"a reply to message {reply.get('in_reply_to')!r} came when {what} was "
                    f"waiting: {_quote(line)}"
                )
            if reply.get("type") != REPLIES[kind]:
                raise self.fail(
                    f"the reply to {what} has type {reply.get('type')!r}, expected "
                    f"{REPLIES[kind]!r}: {_quote(line)}"
                )
        except WireError as exc:
            self.broken = _of_batch(exc, posted)
            raise self.broken from None
        return reply

    def read(
        self,
        reply: dict[str, Any],
        what: str,
        reader: Callable[[dict[str, Any]], T],
        message_id: int | None = None,
    ) -> T:
        """``reader(reply)``, a malformed reply raised as an error naming the message
        (by default the latest one sent)."""
        try:
            return reader(reply)
        except ItfError as exc:
            number = self.next_id if message_id is None else message_id
            raise self.fail(f"the reply to message {number} ({what}) is malformed: {exc}") from None

    def initial_view(self, reply: dict[str, Any]) -> PoolView:
        """The new pool's view in an ``init_ok`` record."""
        return self.views.start(reply["view"], self.protocol >= BATCHES)

    def steps(self, reply: dict[str, Any], count: int) -> list[Step]:
        """The ``applied_batch`` record's steps, ``count`` of them; :class:`ItfError` when
        malformed."""
        _fields(reply, {"type", "in_reply_to", "steps"})
        steps = reply["steps"]
        if not isinstance(steps, list) or len(steps) != count:
            raise ItfError(f"steps: expected a list of {count} steps, one per action")
        read = []
        for number, step in enumerate(steps):
            if not isinstance(step, dict):
                raise ItfError(f"steps[{number}]: expected a record")
            try:
                read.append(self.step(step, header=()))
            except ItfError as exc:
                raise ItfError(f"steps[{number}]: {exc}") from None
        return read

    def step(
        self,
        reply: dict[str, Any],
        returns: Any = None,
        header: tuple[str, ...] = ("type", "in_reply_to"),
    ) -> Step:
        """The ``applied`` (or ``returned``: a result of type ``returns``) record as a
        :class:`Step` (a batch's step has no ``header``); :class:`ItfError` when malformed."""
        _fields(reply, _STEP_FIELDS[header], _OPTIONAL_STEP_FIELDS)
        problems = reply.get("structure_problems", [])
        if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
            raise ItfError("structure_problems: expected a list of strings")
        if returns is None:
            outcome: Any = decode_outcome(reply["outcome"])
        else:
            outcome = decode_returned(reply["outcome"], returns)
        return Step(outcome, self.views.read(reply["view"]), tuple(problems))

    def fail(self, message: str) -> WireError:
        """The error for ``message``, the program ended and this session broken by it."""
        assert self.child is not None
        self.broken = self.child.failure(message)
        return self.broken

    def close(self) -> None:
        """End the program (by its pid, if it does not exit when its input closes)."""
        if self.child is not None and self.owner == os.getpid():
            self.child.close()
        self.child = None  # a later message starts the program again
        self.waiting.clear()
        self.early.clear()
        self.sizes.clear()
        self.upcoming.clear()
        SESSIONS.discard(self)


def hello(reply: dict[str, Any], offerable: frozenset[str]) -> Hello:
    """The ``init_ok`` record as a :class:`Hello` (its ``operations`` some of
    ``offerable``); :class:`ItfError` when malformed."""
    _fields(
        reply,
        {"type", "in_reply_to", "protocol", "name", "profile", "operations", "observes", "view"},
    )
    if reply["protocol"] not in PROTOCOLS or isinstance(reply["protocol"], bool):
        raise ItfError(
            f"protocol {reply['protocol']!r}: this suite speaks protocols "
            f"{', '.join(map(str, PROTOCOLS))}"
        )
    for key in ("name", "profile"):
        if not isinstance(reply[key], str) or not reply[key]:
            raise ItfError(f"{key}: expected a non-empty string")
    lists = {}
    for key in ("operations", "observes"):
        names = reply[key]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ItfError(f"{key}: expected a list of names")
        lists[key] = frozenset(names)
    unknown = sorted(lists["observes"] - set(OBSERVABLES) - {FINE_EVENT_HASHES})
    if unknown:
        raise ItfError(f"observes: unknown {unknown}; expected some of {list(OBSERVABLES)}")
    unknown = sorted(lists["operations"] - offerable)
    if unknown:
        raise ItfError(f"operations: unknown {unknown}; expected some of {sorted(offerable)}")
    return Hello(
        reply["name"], reply["profile"], lists["operations"], lists["observes"], reply["protocol"]
    )


def pool_offers() -> frozenset[str]:
    """What ``operations`` may name: every operation of the table, and ``OPERATION:FIELD``
    for each of its optional arguments."""
    return frozenset(
        name
        for kind in pool_actions()
        for name in (
            kind.operation,
            *(f"{kind.operation}:{field}" for field in optional_arguments(kind)),
        )
    )


#: The fields of a step record, after its ``header`` (``applied`` has one, a batch's
#: step none), and those it may have.
_STEP_FIELDS: dict[tuple[str, ...], frozenset[str]] = {
    header: frozenset({*header, "outcome", "view"}) for header in (("type", "in_reply_to"), ())
}
_OPTIONAL_STEP_FIELDS = frozenset({"structure_problems"})


def _fields(
    reply: dict[str, Any],
    required: set[str] | frozenset[str],
    optional: frozenset[str] | set[str] = frozenset(),
) -> None:
    keys = reply.keys()
    if not required <= keys:
        raise ItfError(f"missing field(s) {sorted(required - keys)}")
    extra = keys - required
    if extra and not extra <= optional:
        raise ItfError(f"unknown field(s) {sorted(extra - optional)}")


def _of_batch(exc: WireError, posted: Posted) -> WireError:
    """``exc``, a :class:`~.child.BatchUnanswered` when the program answered nothing to
    the batch ``posted``."""
    if isinstance(exc, ProgramGone) and posted.kind == "batch":
        return BatchUnanswered(str(exc))
    return exc


def _quote(line: bytes) -> str:
    text = line[:200].decode(errors="replace")
    return repr(text) + ("..." if len(line) > 200 else "")


#: No message: :meth:`Session.drop_before` it drops every reply waiting.
_NOTHING = Posted(0, "init", "nothing")

#: Every session with a running program, ended at exit if not before.
SESSIONS: set[Session] = set()


def close_sessions() -> None:
    """End every program still running."""
    for session in list(SESSIONS):
        session.close()


atexit.register(close_sessions)
