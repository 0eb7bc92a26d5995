"""The spec's consumer models (``count``, ``set``) as consumers of the protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvpool.spec.consumer import ConsumerState, EventViolation
from kvpool.spec.events import Event

from .incremental import IncrementalConsumer


class ModelConsumer:
    """One of :data:`kvpool.spec.consumer.CONSUMER_MODELS`, kept in place (the spec's rule
    body on one map: :class:`~.incremental.IncrementalConsumer`), so that a batch costs
    the same whatever the keys held; ``state`` shows it as the spec's
    :class:`~kvpool.spec.consumer.ConsumerState`."""

    def __init__(self, model: str) -> None:
        self.kept = IncrementalConsumer(model)  # ValueError names the models
        self.name: str = self.kept.model

    @property
    def state(self) -> ConsumerState:
        """The holdings now (a view, not a copy: read it before the next batch)."""
        return self.kept.view()

    def apply(self, events: Sequence[Event]) -> tuple[EventViolation, ...]:
        return self.apply_in(events, None)

    def apply_in(self, events: Sequence[Event], medium: str | None) -> tuple[EventViolation, ...]:
        """``events`` of one medium (the wire's ``medium``; ``None`` for a spec stream)."""
        found: list[EventViolation] = []
        for event in events:
            found.extend(self.kept.apply(event, medium))
        return tuple(found)

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        held = 0
        for h in block_hashes:
            if self.kept.held.get((None, group_id, h), 0) < 1:
                break
            held += 1
        return held

    def residency(self) -> Mapping[tuple[int, bytes], int]:
        return self.state.residency()
