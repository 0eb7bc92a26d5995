"""The one judge of a KV-event stream: a consumer fed the stream, asked against the truth.

The events level (pool and request machines), a manager that publishes its own events
and ``kvpool monitor`` all judge a stream here. A :class:`StreamJudge` holds one consumer
(:mod:`.protocol`) and, beside a router, the spec's ``count`` model as the *reference*:

1. the stream's own properties (``events-parent-known``, ``events-removed-known``), from
   the spec model judged, or from the reference beside a router: a store naming a parent
   nobody was told of is the stream's fault, found before any router is asked;
2. the model's replay against the pool's keys (``events-replay-index``,
   ``events-cleared-empty``), when the pool's keys are known: for a router, the
   reference's replay, so that the stream is shown to follow the count contract first;
3. the router's answers (``router-recall``, ``router-copies``, ``router-precision``): for
   every placeable prefix the stream has named (:mod:`.prefixes`), the leading blocks the
   consumer says the worker holds against those a lookup on the pool hits (the spec's
   :func:`~kvpool.spec.consumer.served_blocks`, or the reference's, in a monitor).

A router that credits fewer blocks than the pool serves breaks ``router-recall``, unless
the loss is the one a consumer that keeps hashes as a set shows: the first block it lost
was named by a ``BlockRemoved`` since it was last asked (or was such a loss at the last
asking, still open), the pool still serves it (another copy remains), and the router
credits exactly what the spec's ``set`` model, fed the same stream beside it, holds.
That is ``router-copies``: a rule of its own (copies counted), so a router that breaks
both is reported for both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from kvpool.spec.consumer import (
    EventViolation,
    chain_violations,
    pool_residency,
    pool_violations,
    served_blocks,
    short_hash,
)
from kvpool.spec.events import AllBlocksCleared, BlockRemoved, Event
from kvpool.spec.state import PoolState

from ..machines.events.check import describe
from .models import ModelConsumer
from .naming import make_consumer
from .prefixes import PrefixBook
from .protocol import Consumer

Residency = Mapping[tuple[int, bytes], int]
#: How many leading blocks of a prefix (in a group) the truth serves.
Served = Callable[[Sequence[bytes], int], int]

STREAM_PROPERTIES = ("events-parent-known", "events-removed-known")
ROUTER_PROPERTIES = ("router-recall", "router-copies", "router-precision")
#: The order a step's router violations are reported in (the shortest prefix first in each).
ROUTER_ORDER = {name: i for i, name in enumerate(ROUTER_PROPERTIES)}


def prefix_text(hashes: Sequence[bytes]) -> str:
    """A prefix in messages: its hashes short, the middle left out when it is long."""
    shown = [short_hash(h) for h in hashes]
    if len(shown) > 6:
        shown = [*shown[:2], f"... {len(shown) - 4} more ...", *shown[-2:]]
    return "[" + ", ".join(shown) + "]"


class StreamJudge:
    """One consumer of one worker's stream (the reference beside it when it is a router)."""

    def __init__(
        self, consumer: Consumer | str, parent_known: frozenset[int] | None = None
    ) -> None:
        """``parent_known``: the groups whose stores promise a parent the stream still holds
        (``events-parent-known`` is judged there only); ``None``: every group."""
        self.consumer: Consumer = make_consumer(consumer) if isinstance(consumer, str) else consumer
        self.parent_known = parent_known
        judged = self.consumer
        #: The spec model whose replay is compared with the pool (the consumer itself, or
        #: the count model beside a router).
        self.model: ModelConsumer = (
            judged if isinstance(judged, ModelConsumer) else ModelConsumer("count")
        )
        #: Beside a router, the spec's set model: what a consumer that drops a hash at its
        #: first removal holds (``router-copies``).
        self.as_set: ModelConsumer | None = (
            None if isinstance(judged, ModelConsumer) else ModelConsumer("set")
        )
        #: ``(group, hash)`` named by a ``BlockRemoved`` since the router was last asked.
        self.removed: set[tuple[int, bytes]] = set()
        #: The losses the last answers showed at the removal of one copy: each stays a
        #: ``router-copies`` loss while it lasts (a monitor asks again after every batch).
        self.dropped: set[tuple[int, bytes]] = set()
        self.book = PrefixBook()
        #: Every event fed so far, in order (for messages and tests).
        self.stream: list[Event] = []
        self.checked: Counter[str] = Counter()
        #: Prefixes left unasked because a link on them was unknown or ambiguous.
        self.unplaceable = 0

    @property
    def name(self) -> str:
        return self.consumer.name

    @property
    def is_router(self) -> bool:
        """Whether the consumer is judged by its answers (not one of the spec's models)."""
        return not isinstance(self.consumer, ModelConsumer)

    def who(self, violation: EventViolation) -> str:
        """The consumer a violation is about, as messages name it: the reference for the
        stream's properties beside a router, else the consumer judged."""
        if self.is_router and violation.property.startswith("events-"):
            return f"{self.model.name} consumer (the reference beside {self.name})"
        return f"{self.name} consumer"

    def finding(self, violation: EventViolation, operation: str, events: Sequence[Event]) -> str:
        """The message of a finding: the step, the property, who it is about, the events."""
        return describe(violation, self.who(violation), operation, tuple(events))

    def feed(
        self, events: Sequence[Event], residency: Residency | None
    ) -> tuple[EventViolation, ...]:
        """Apply ``events`` to the consumer (and the reference); the violations of the
        stream properties, then, when the pool's keys ``residency`` are known, of the
        model's replay against them."""
        self.stream.extend(events)
        self.book.note(events)
        found = tuple(v for v in self.model.apply(events) if self.promised(v))
        if self.as_set is not None:
            self.as_set.apply(events)
            self.removed.update(
                (e.group_id, e.block_hash) for e in events if isinstance(e, BlockRemoved)
            )
            self.consumer.apply(events)
        self.checked.update(STREAM_PROPERTIES)
        if residency is None:
            return found
        return found + self._replay(events, residency)

    def chain(
        self, events: Sequence[Event], parents: Mapping[tuple[int, bytes], bytes | None]
    ) -> tuple[EventViolation, ...]:
        """The links ``events`` name against the pool's own chain ``parents`` (see
        :func:`~kvpool.spec.consumer.chain_violations`), in the groups whose stores promise
        a parent (after :meth:`feed`: a parent nobody was told of is reported there)."""
        self.checked.update(("events-parent-chain",))
        return tuple(v for v in chain_violations(events, parents) if self.promised(v))

    def promised(self, violation: EventViolation) -> bool:
        """Whether the stream promises what ``violation`` says it broke."""
        return (
            violation.property not in ("events-parent-known", "events-parent-chain")
            or self.parent_known is None
            or violation.group_id in self.parent_known
        )

    def _replay(self, events: Sequence[Event], residency: Residency) -> tuple[EventViolation, ...]:
        cleared = any(isinstance(e, AllBlocksCleared) for e in events)
        self.checked.update(("events-replay-index",))
        if cleared:
            self.checked.update(("events-cleared-empty",))
        return pool_violations(self.model.state, residency, cleared=cleared)

    def against_spec(self, state: PoolState, cleared: bool) -> tuple[EventViolation, ...]:
        """The model's replay compared with the spec's pool (a target showing no keys)."""
        self.checked.update(("events-replay-index",))
        return pool_violations(self.model.state, pool_residency(state), cleared=cleared)

    def routes(self, served: Served) -> tuple[EventViolation, ...]:
        """The consumer asked about every placeable prefix the stream has named: it must
        believe the worker holds exactly the leading blocks ``served`` says (fewer:
        ``router-recall``, or ``router-copies`` for a loss at the removal of one copy;
        more: ``router-precision``). In that order, the shortest wrong prefix first."""
        asked, unplaceable = self.book.prefixes()
        self.unplaceable += unplaceable
        removed, self.removed = self.removed | self.dropped, set()
        self.dropped = set()
        found: list[tuple[int, EventViolation]] = []
        # a router whose lookups name one group (token-only) is asked about those only
        groups = getattr(self.consumer, "groups", None)
        for group, hashes in asked:
            if groups is not None and group not in groups:
                continue
            truth = served(hashes, group)
            claimed = self.consumer.held_blocks(hashes, group)
            self.checked.update(ROUTER_PROPERTIES)
            if claimed == truth:
                continue
            found.append((len(hashes), self._violation(hashes, group, truth, claimed, removed)))
        found.sort(key=lambda pair: (ROUTER_ORDER[pair[1].property], pair[0]))
        return tuple(v for _, v in found)

    def _violation(
        self,
        hashes: Sequence[bytes],
        group: int,
        truth: int,
        claimed: int,
        removed: set[tuple[int, bytes]],
    ) -> EventViolation:
        """What a wrong answer about ``hashes`` breaks, and the message saying so."""
        lost = hashes[min(truth, claimed)]
        said = (
            f"of the prefix {prefix_text(hashes)} (group {group}, {len(hashes)} block(s)) the "
            f"pool serves {truth} leading block(s); the {self.name} consumer believes the "
            f"worker holds {claimed}"
        )
        if claimed > truth:
            return EventViolation("router-precision", lost, group, said)
        copies = self.model.kept.held.get((None, group, lost), 0)
        if (
            (group, lost) in removed
            and copies >= 1
            and self.as_set is not None
            and self.as_set.held_blocks(hashes, group) == claimed
        ):
            self.dropped.add((group, lost))
            return EventViolation(
                "router-copies",
                lost,
                group,
                f"{said}: it dropped {short_hash(lost)} at the removal of one copy while "
                f"{copies} more remain (as a consumer that keeps hashes as a set would)",
            )
        return EventViolation("router-recall", lost, group, said)

    def routes_on_spec(self, state: PoolState) -> tuple[EventViolation, ...]:
        """:meth:`routes` with the spec's pool as the truth (what a lookup hits)."""
        return self.routes(lambda hashes, group: served_blocks(state, hashes, group))

    def routes_on_residency(self, residency: Residency) -> tuple[EventViolation, ...]:
        """:meth:`routes` with a pool's keys ``{(group, hash): copies}`` as the truth."""

        def served(hashes: Sequence[bytes], group: int) -> int:
            n = 0
            for h in hashes:
                if residency.get((group, h), 0) < 1:
                    break
                n += 1
            return n

        return self.routes(served)
