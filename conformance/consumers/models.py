"""The spec's consumer models (``count``, ``set``) as consumers of the protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvpool.spec.consumer import (
    ConsumerState,
    EventViolation,
    apply_events,
    new_consumer,
)
from kvpool.spec.events import Event


class ModelConsumer:
    """One of :data:`kvpool.spec.consumer.CONSUMER_MODELS`, keeping its state immutable
    inside: ``state`` is the spec's :class:`~kvpool.spec.consumer.ConsumerState`."""

    def __init__(self, model: str) -> None:
        self.state: ConsumerState = new_consumer(model)  # ValueError names the models
        self.name: str = self.state.model

    def apply(self, events: Sequence[Event]) -> tuple[EventViolation, ...]:
        return self.apply_in(events, None)

    def apply_in(self, events: Sequence[Event], medium: str | None) -> tuple[EventViolation, ...]:
        """``events`` of one medium (the wire's ``medium``; ``None`` for a spec stream)."""
        self.state, found = apply_events(self.state, events, medium)
        return found

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        held = 0
        for h in block_hashes:
            if self.state.copies(h, group_id) < 1:
                break
            held += 1
        return held

    def residency(self) -> Mapping[tuple[int, bytes], int]:
        return self.state.residency()
