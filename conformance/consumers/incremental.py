"""The consumer models kept in place, for a monitor that keeps up with a busy stream.

:mod:`kvpool.spec.consumer` states the models as pure functions over an immutable state:
every event returns a new state, which copies the held keys, and comparing a ``set``
consumer with the ``count`` consumer beside it walks every key. That is the oracle, and
it is what a reader checks; its cost grows with the keys held. Here the same rules run at
a cost per event that does not:

- :class:`IncrementalConsumer` holds one mutable map and applies each event with the
  spec's own rule body (:func:`~kvpool.spec.consumer.apply_in_place`), so the two cannot
  disagree on what an event does;
- :class:`SetBesideCount` keeps a ``set`` consumer beside the ``count`` one (as the
  monitor judges it) as the count consumer and the residences the set consumer lost, so
  that where the two differ is known event by event: only the residences an event names
  can change, so only those are looked at.

``tests/conformance/test_incremental_consumers.py`` checks both against the spec's
functions on random streams.
"""

from __future__ import annotations

from kvpool.spec.consumer import (
    ConsumerModel,
    ConsumerState,
    EventViolation,
    Residence,
    apply_in_place,
    difference_violation,
    new_consumer,
)
from kvpool.spec.events import BlockRemoved, BlockStored, Event

#: A difference as the monitor remembers it: ``(property, group, hash)`` (no medium).
DifferenceKey = tuple[str, int | None, bytes | None]
REPLAY_INDEX = "events-replay-index"


class IncrementalConsumer:
    """A consumer of ``model`` whose holdings change in place, one event at a time."""

    def __init__(self, model: str) -> None:
        self.model: ConsumerModel = new_consumer(model).model  # ValueError names the models
        #: (medium, group, hash) -> copies held, >= 1, as :class:`ConsumerState` keeps them.
        self.held: dict[Residence, int] = {}

    def apply(
        self, event: Event, medium: str | None = None, reported: object = None
    ) -> list[EventViolation]:
        """``event`` applied; the violations of the stream properties it shows.
        (``reported`` is :class:`SetBesideCount`'s: a consumer on its own has no other
        consumer to differ from.)"""
        return apply_in_place(self.model, self.held, event, medium)

    def keys_held(self) -> int:
        return len(self.held)

    def view(self) -> ConsumerState:
        """The holdings as the spec's state (not a copy: read it before the next event)."""
        return ConsumerState(model=self.model, held=self.held)


class SetBesideCount:
    """A ``set`` consumer judged beside a ``count`` consumer (the contract vLLM documents),
    both fed every event, kept as one: the count consumer's holdings, and ``lost``, the
    residences the set consumer dropped while the count consumer still holds copies.

    The set consumer holds exactly the count consumer's residences that are not lost: a
    store makes both hold what it names; a removal takes one copy from the count consumer
    and the whole residence from the set consumer, so it is lost if copies remain; a
    clear empties both in its medium. Its own violations come from the spec's rule body
    applied to the few residences the event names (:meth:`holds`).

    ``lost`` is where :func:`~kvpool.spec.consumer.consumer_violations` finds the two
    apart (``events-replay-index``), kept as the events come; :meth:`apply` reports, at a
    removal, the differences whose key was not reported at the removal before, as a
    monitor recomputing every difference at every removal would (``review`` holds the
    residences whose difference changed in between: closed by a store, or kept through a
    clear after which the monitor forgets what it reported).
    """

    model: ConsumerModel = "set"

    def __init__(self) -> None:
        self.count = IncrementalConsumer("count")
        self.lost: set[Residence] = set()
        #: How many lost residences each (group, hash) has (over media).
        self.per_key: dict[tuple[int, bytes], int] = {}
        self.review: set[Residence] = set()

    def holds(self, where: Residence) -> bool:
        """Whether the set consumer holds ``where``."""
        return where not in self.lost and self.count.held.get(where, 0) > 0

    def keys_held(self) -> int:
        """How many residences the set consumer holds."""
        return len(self.count.held) - len(self.lost)

    def view(self) -> ConsumerState:
        """The set consumer's holdings as the spec's state (a copy: one walk of them)."""
        held = {where: 1 for where in self.count.held if where not in self.lost}
        return ConsumerState(model="set", held=held)

    def reported_now(self) -> set[DifferenceKey]:
        """The keys of every difference now (what a monitor has reported once it has
        seen them all, e.g. after rebuilding the consumers from a snapshot)."""
        self.review.clear()
        return {(REPLAY_INDEX, where[1], where[2]) for where in self.lost}

    def apply(
        self, event: Event, medium: str | None, reported: set[DifferenceKey] | None = None
    ) -> list[EventViolation]:
        """``event`` applied to both consumers: the set consumer's violations, and after a
        removal the differences whose key is not in ``reported`` (which is then brought
        up to date with the differences there are now)."""
        count = self.count.held
        if type(event) is BlockRemoved:
            where = (medium, event.group_id, event.block_hash)
            was_lost = where in self.lost
            found = apply_in_place("set", {where: 1} if self.holds(where) else {}, event, medium)
            apply_in_place("count", count, event, medium)
            if count.get(where, 0) > 0:
                if not was_lost:
                    self._lose(where)
            elif was_lost:
                self._regain(where)
            if reported is not None and (was_lost or self.review or where in self.lost):
                self.review.add(where)
                found.extend(self._fresh(reported))
            return found
        if type(event) is BlockStored:
            group, parent = event.group_id, event.parent_block_hash
            named: dict[Residence, int] = {}
            if parent is not None and self.holds((medium, group, parent)):
                named[(medium, group, parent)] = 1
            found = apply_in_place("set", named, event, medium)
            apply_in_place("count", count, event, medium)
            if self.lost:  # what the store names is held by both again
                for h in event.block_hashes:
                    if (medium, group, h) in self.lost:
                        self._regain((medium, group, h))
                        self.review.add((medium, group, h))
            return found
        apply_in_place("count", count, event, medium)
        for where in [w for w in self.lost if w[0] == medium]:
            self._regain(where)
        # the monitor forgets what it reported at a clear: what is still lost (in another
        # medium) is looked at again at the next removal, and reported again
        self.review.update(self.lost)
        return []

    def _lose(self, where: Residence) -> None:
        self.lost.add(where)
        key = (where[1], where[2])
        self.per_key[key] = self.per_key.get(key, 0) + 1

    def _regain(self, where: Residence) -> None:
        self.lost.discard(where)
        key = (where[1], where[2])
        left = self.per_key[key] - 1
        if left:
            self.per_key[key] = left
        else:
            del self.per_key[key]

    def _fresh(self, reported: set[DifferenceKey]) -> list[EventViolation]:
        """The lost residences under review whose key is not in ``reported``; then
        ``reported`` holds the key of every difference there is (beside other
        properties' keys). The cost is that of the residences under review."""
        review = sorted(self.review, key=_order) if len(self.review) > 1 else self.review
        found = [
            difference_violation("set", "count", where, 0, self.count.held[where])
            for where in review
            if where in self.lost and (REPLAY_INDEX, where[1], where[2]) not in reported
        ]
        for where in review:
            key: DifferenceKey = (REPLAY_INDEX, where[1], where[2])
            if (where[1], where[2]) in self.per_key:
                reported.add(key)
            else:
                reported.discard(key)
        self.review = set()
        return found


def _order(where: Residence) -> tuple[str, int, bytes]:
    """The order :func:`~kvpool.spec.consumer.consumer_violations` lists residences in."""
    return (str(where[0]), where[1], where[2])
