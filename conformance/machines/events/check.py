"""The events level's side of a step: a target's events taken, and a finding worded.

At the ``events`` level a :class:`~kvpool.conformance.machines.pool.lockstep.LockstepRun` takes the
target's events after every action (the action's own ``take_events``, or one more call)
and hands them to the one judge of streams (:class:`~kvpool.conformance.consumers.judge.
StreamJudge`), with the keys the target shows: its index if it shows one, else its blocks'
keys, else the spec's. The stream is judged before the lockstep compares anything else of
the step, so a finding here is about the stream itself; a router's answers are judged
after the spec has taken the same events.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvpool.spec import (
    SEED,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Event,
    EventViolation,
    Profile,
)
from kvpool.spec.consumer import residency_of_keys, short_hash
from kvpool.spec.events import as_consumers_read, as_fine
from kvpool.spec.keys import group_of, hash_of, make_key

from ..pool.target import PoolView

Residency = Mapping[tuple[int, bytes], int]


def target_residency(view: PoolView, profile: Profile = SEED) -> Residency | None:
    """``{(group, hash): copies}`` of what the target shows: its index (blocks per key),
    else its blocks' keys; ``None`` when it shows neither. Each hash as the profile's
    events name it (a coarse key as its last fine hash, ``coarse_events_name_fine_hash``)."""
    if view.index is not None:
        keys: list[bytes] = [k for k, blocks in view.index for _ in blocks]
    elif view.keys is not None:
        keys = [k for keys in view.keys for k in keys]
    else:
        return None
    if profile.coarse_events_name_fine_hash:
        keys = [make_key(as_fine(hash_of(k)), group_of(k)) for k in keys]
    return residency_of_keys(keys)


def taken_events(result: object, profile: Profile = SEED) -> tuple[Event, ...]:
    """What a ``take_events`` returned, as events, read as the profile's consumers read
    them (a coarse key as its last fine hash, ``coarse_events_name_fine_hash``);
    ``TypeError`` for anything else."""
    if result is None:
        return ()
    if not isinstance(result, tuple):
        raise TypeError(f"take_events returned {result!r}, not a tuple of KV events")
    events: list[Event] = []
    for item in result:
        if not isinstance(item, BlockStored | BlockRemoved | AllBlocksCleared):
            raise TypeError(f"take_events returned {item!r} among its events")
        events.append(item)
    return as_consumers_read(tuple(events), profile.coarse_events_name_fine_hash)


def event_line(event: Event) -> str:
    """One event, short: ``BlockStored([h1, h2] after p, group 0)``, hashes as in messages."""
    if isinstance(event, BlockStored):
        hashes = ", ".join(short_hash(h) for h in event.block_hashes)
        parent = short_hash(event.parent_block_hash)
        return f"BlockStored([{hashes}] after {parent}, group {event.group_id})"
    if isinstance(event, BlockRemoved):
        return f"BlockRemoved({short_hash(event.block_hash)}, group {event.group_id})"
    return "AllBlocksCleared()"


def describe(
    violation: EventViolation, consumer: str, operation: str, events: tuple[Event, ...] = ()
) -> str:
    """A finding's message: the step, the property (quoted as the lockstep's findings quote
    theirs, so one property is one finding), the consumer it breaks (``count consumer``)
    and the events the step published."""
    published = "; ".join(event_line(e) for e in events) or "nothing"
    return (
        f"after {operation}: property '{violation.property}' broken for the {consumer}: "
        f"{violation.message} (this step published: {published})"
    )
