"""The consumer models kept in place, for a monitor that keeps up with a busy stream.

:mod:`kvpool.spec.consumer` states the models as pure functions over an immutable state:
every event returns a new state, which copies the held keys, and comparing a ``set``
consumer with the ``count`` consumer beside it walks every key. That is the oracle, and
it is what a reader checks; its cost grows with the keys held. Here the same rules run at
a cost per event that does not:

- :class:`IncrementalConsumer` holds one mutable map and applies each event with the
  spec's own rule body (:func:`~kvpool.spec.consumer.apply_in_place`), so the two cannot
  disagree on what an event does;
- :class:`IncrementalDifferences` follows, event by event, where a judged consumer and its
  truth (a ``set`` consumer and the ``count`` one) differ: only the residences an event
  names can change, so only those are looked at.

``tests/conformance/consumers/test_incremental.py`` checks both against the spec's
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
from kvpool.spec.events import AllBlocksCleared, BlockRemoved, BlockStored, Event

#: A difference as the monitor remembers it: ``(property, group, hash)`` (no medium).
DifferenceKey = tuple[str, int | None, bytes | None]
REPLAY_INDEX = "events-replay-index"


class IncrementalConsumer:
    """A consumer of ``model`` whose holdings change in place, one event at a time."""

    def __init__(self, model: str) -> None:
        self.model: ConsumerModel = new_consumer(model).model  # ValueError names the models
        #: (medium, group, hash) -> copies held, >= 1, as :class:`ConsumerState` keeps them.
        self.held: dict[Residence, int] = {}

    def apply(self, event: Event, medium: str | None = None) -> list[EventViolation]:
        """``event`` applied; the violations of the stream properties it shows."""
        return apply_in_place(self.model, self.held, event, medium)

    def view(self) -> ConsumerState:
        """The holdings as the spec's state (not a copy: read it before the next event)."""
        return ConsumerState(model=self.model, held=self.held)


def touched(event: Event, medium: str | None) -> list[Residence]:
    """The residences a store or a removal changes (a clear changes all of its medium)."""
    if isinstance(event, BlockStored):
        return [(medium, event.group_id, h) for h in event.block_hashes]
    if isinstance(event, BlockRemoved):
        return [(medium, event.group_id, event.block_hash)]
    return []


class IncrementalDifferences:
    """Where ``judged`` and ``truth`` (fed the same events) differ, kept as they go.

    ``differing`` is exact at every :meth:`fresh`: the residences whose copies differ as
    the judged model sees a difference (copies for ``count``, presence for ``set``), as
    :func:`~kvpool.spec.consumer.consumer_violations` would list them. ``dirty`` gathers
    the residences whose state may have changed since the last :meth:`fresh`: those a
    removal named, and those a store named that differed (the truth being a ``count``
    consumer, a store leaves both holding the residence: it closes a difference or
    changes nothing).
    """

    def __init__(self, judged: IncrementalConsumer, truth: IncrementalConsumer) -> None:
        self.judged = judged
        self.truth = truth
        self.differing: set[Residence] = set()
        #: How many differing residences each (group, hash) has (over media).
        self.per_key: dict[tuple[int, bytes], int] = {}
        self.dirty: set[Residence] = set()

    def apply(
        self, event: Event, medium: str | None, reported: set[DifferenceKey]
    ) -> list[EventViolation]:
        """``event`` applied to both consumers (the judged one's violations returned, and
        after a removal the differences :meth:`fresh` finds): :meth:`applied` and
        :meth:`fresh` in one call, as a monitor makes them for every event."""
        found = apply_in_place(self.judged.model, self.judged.held, event, medium)
        apply_in_place(self.truth.model, self.truth.held, event, medium)
        if type(event) is BlockRemoved:
            where = (medium, event.group_id, event.block_hash)
            if self.dirty:
                self.dirty.add(where)
                found.extend(self.fresh(reported))
            elif where in self.differing or self._differs(where):
                found.extend(self._fresh_one(where, reported))
            # else it did not differ and does not: nothing to settle (with nothing dirty,
            # every key in ``reported`` has a differing residence, so none went stale)
        elif self.differing or type(event) is not BlockStored:
            self.applied(event, medium)  # (a store when nothing differs changes nothing)
        return found

    def applied(self, event: Event, medium: str | None) -> None:
        """Both consumers have taken ``event`` (in ``medium``): note what it named."""
        if isinstance(event, AllBlocksCleared):
            for where in [w for w in self.differing if w[0] == medium]:
                self._settle(where)
            # the monitor forgets what it reported at a clear: what still differs (in
            # another medium) is looked at again, and reported again
            self.dirty.update(self.differing)
            return
        if isinstance(event, BlockStored):
            # a store leaves both consumers holding the residence (and adds one copy to
            # each): it opens no difference, and can only close one already open
            differing = self.differing
            self.dirty.update(w for w in touched(event, medium) if w in differing)
        else:
            self.dirty.update(touched(event, medium))

    def rebuild(self) -> None:
        """Every residence looked at again (after the consumers were rebuilt wholesale)."""
        self.differing.clear()
        self.per_key.clear()
        self.dirty = {*self.judged.held, *self.truth.held}

    def _differs(self, where: Residence) -> bool:
        mine, theirs = self.judged.held.get(where, 0), self.truth.held.get(where, 0)
        return mine != theirs if self.judged.model == "count" else (mine > 0) != (theirs > 0)

    def _settle(self, where: Residence) -> bool:
        """``where``'s difference brought up to date; whether it differs."""
        key = (where[1], where[2])
        differs = self._differs(where)
        if differs and where not in self.differing:
            self.differing.add(where)
            self.per_key[key] = self.per_key.get(key, 0) + 1
        elif not differs and where in self.differing:
            self.differing.discard(where)
            left = self.per_key[key] - 1
            if left:
                self.per_key[key] = left
            else:
                del self.per_key[key]
        return differs

    def fresh(self, reported: set[DifferenceKey]) -> list[EventViolation]:
        """The differences whose key is not in ``reported``, which is then brought up to
        date: afterwards it holds (beside its other properties' keys) exactly the
        ``events-replay-index`` keys that differ now. The cost is that of the residences
        named since the last call."""
        if len(self.dirty) == 1:  # the common case: the one residence a removal named
            return self._fresh_one(self.dirty.pop(), reported)
        dirty = sorted(self.dirty, key=_order)
        self.dirty.clear()
        differing = [where for where in dirty if self._settle(where)]
        found = [
            difference_violation(
                self.judged.model,
                self.truth.model,
                where,
                self.judged.held.get(where, 0),
                self.truth.held.get(where, 0),
            )
            for where in differing
            if (REPLAY_INDEX, where[1], where[2]) not in reported
        ]
        for where in dirty:
            key: DifferenceKey = (REPLAY_INDEX, where[1], where[2])
            if (where[1], where[2]) in self.per_key:
                reported.add(key)
            else:
                reported.discard(key)
        return found

    def _fresh_one(self, where: Residence, reported: set[DifferenceKey]) -> list[EventViolation]:
        """:meth:`fresh` when one residence is dirty (the same steps, without the sort)."""
        key: DifferenceKey = (REPLAY_INDEX, where[1], where[2])
        found = []
        if self._settle(where):
            if key not in reported:
                found.append(
                    difference_violation(
                        self.judged.model,
                        self.truth.model,
                        where,
                        self.judged.held.get(where, 0),
                        self.truth.held.get(where, 0),
                    )
                )
            reported.add(key)
        elif (where[1], where[2]) in self.per_key:
            reported.add(key)
        else:
            reported.discard(key)
        return found


def _order(where: Residence) -> tuple[str, int, bytes]:
    """The order :func:`~kvpool.spec.consumer.consumer_violations` lists residences in."""
    return (str(where[0]), where[1], where[2])
