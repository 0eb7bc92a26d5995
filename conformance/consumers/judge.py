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
3. the router's answers (``router-recall``, ``router-precision``): for every placeable
   prefix the stream has named (:mod:`.prefixes`), the leading blocks the consumer says
   the worker holds against those a lookup on the pool hits (the spec's
   :func:`~kvpool.spec.consumer.served_blocks`, or the reference's, in a monitor).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from kvpool.spec.consumer import (
    EventViolation,
    pool_residency,
    pool_violations,
    served_blocks,
    short_hash,
)
from kvpool.spec.events import AllBlocksCleared, Event
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
ROUTER_PROPERTIES = ("router-recall", "router-precision")


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
        if self.is_router:
            self.consumer.apply(events)
        self.checked.update(STREAM_PROPERTIES)
        if residency is None:
            return found
        return found + self._replay(events, residency)

    def promised(self, violation: EventViolation) -> bool:
        """Whether the stream promises what ``violation`` says it broke."""
        return (
            violation.property != "events-parent-known"
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
        ``router-recall``; more: ``router-precision``). The shortest wrong prefix first."""
        asked, unplaceable = self.book.prefixes()
        self.unplaceable += unplaceable
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
            prop = "router-recall" if claimed < truth else "router-precision"
            found.append(
                (
                    len(hashes),
                    EventViolation(
                        prop,
                        hashes[min(truth, claimed)],
                        group,
                        f"of the prefix {prefix_text(hashes)} (group {group}, {len(hashes)} "
                        f"block(s)) the pool serves {truth} leading block(s); the {self.name} "
                        f"consumer believes the worker holds {claimed}",
                    ),
                )
            )
        found.sort(key=lambda pair: (pair[1].property != "router-recall", pair[0]))
        return tuple(v for _, v in found)

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
