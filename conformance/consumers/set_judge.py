"""The set model judged on a request run's stream, re-sent stores included.

A request in the ``"full"`` report mode has its prefix-cache hits published again
(:mod:`kvpool.spec.manager.report`): a ``BlockStored`` of hashes the pool already holds,
which no removal answers. The contract: one more copy for the ``count`` model (the run's
:class:`~.judge.StreamJudge` holds its truth so), nothing for the ``set`` model where it
holds the hash, and the hash added where it does not (a window's null positions; a hash
it lost while the pool kept a copy).

:class:`SetJudge` feeds a set consumer the stream the manager under test published and
holds the spec's ``set`` model (:func:`kvpool.spec.consumer.apply_events`) of the stream
the spec's manager published beside it; after every step the two must hold the same
hashes (``events-replay-index``, by presence: what a set consumer routes by). The stream
properties (a parent or a removal nobody was told of) are the count judge's: a set
consumer meets removals of hashes it already dropped by design.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvpool.spec.consumer import (
    EventViolation,
    apply_events,
    new_consumer,
    short_hash,
)
from kvpool.spec.events import Event

from .models import ModelConsumer
from .protocol import Consumer


class SetJudge:
    """A set consumer of the stream judged, beside the spec's set model of the truth."""

    def __init__(self, consumer: Consumer | None = None) -> None:
        self.consumer: Consumer = ModelConsumer("set") if consumer is None else consumer
        self.truth = new_consumer("set")

    def feed(
        self, actual: Sequence[Event], expected: Sequence[Event]
    ) -> tuple[EventViolation, ...]:
        """One step: ``actual`` (the stream under test) to the consumer, ``expected`` (the
        spec's) to the truth; every hash one of them holds and the other does not."""
        self.consumer.apply(actual)
        self.truth, _ = apply_events(self.truth, expected)
        have = self.consumer.residency()
        if have is None:
            return ()
        want = self.truth.residency()
        found = []
        for group, h in sorted({k for k, n in have.items() if n > 0} ^ set(want)):
            mine, theirs = ("lacks", "holds") if (group, h) in want else ("holds", "lacks")
            found.append(
                EventViolation(
                    "events-replay-index",
                    h,
                    group,
                    f"the {self.consumer.name} consumer {mine} hash {short_hash(h)} (group "
                    f"{group}); the spec's set model of the same stream {theirs} it (a store "
                    "of a hash it holds, a re-sent one too, is nothing new to a set consumer; "
                    "a removal drops it)",
                )
            )
        return tuple(found)
