"""KV-cache events as the spec observes them.

Only what the pool decides is observed: which hashes were stored or removed, under which
group, the parent hash and the token range of a stored batch. Hashes are without the group
suffix, as pools publish them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class BlockStored:
    """Blocks were registered in the prefix cache (one event per caching call)."""

    block_hashes: tuple[bytes, ...]
    parent_block_hash: bytes | None
    group_id: int
    block_size: int
    num_tokens: int


@dataclass(frozen=True, order=True)
class BlockRemoved:
    """One key left the prefix cache."""

    block_hash: bytes
    group_id: int


@dataclass(frozen=True, order=True)
class AllBlocksCleared:
    """The whole prefix cache was reset."""


Event = BlockStored | BlockRemoved | AllBlocksCleared

#: The bytes of one fine hash (SHA-256); a longer hash is fine hashes concatenated.
FINE_HASH_BYTES = 32


def as_fine(block_hash: bytes) -> bytes:
    """The hash a consumer of 64-bit integer event hashes reads ``block_hash`` as: its last
    fine hash, since the integer of a concatenation is the integer of its last fine hash.

    post: __return__ == block_hash[-FINE_HASH_BYTES:]
    """
    return block_hash[-FINE_HASH_BYTES:]


def published(event: Event) -> Event:
    """``event`` as far as a consumer of integer event hashes can tell it apart: every hash
    read as :func:`as_fine`.

    post: type(__return__) is type(event)
    """
    if isinstance(event, BlockStored):
        parent = event.parent_block_hash
        return BlockStored(
            block_hashes=tuple(as_fine(h) for h in event.block_hashes),
            parent_block_hash=None if parent is None else as_fine(parent),
            group_id=event.group_id,
            block_size=event.block_size,
            num_tokens=event.num_tokens,
        )
    if isinstance(event, BlockRemoved):
        return BlockRemoved(as_fine(event.block_hash), event.group_id)
    return event


def as_consumers_read(events: tuple[Event, ...], coarse_as_fine: bool) -> tuple[Event, ...]:
    """``events`` as their consumers tell them apart: each :func:`published` where the
    profile says a coarse key's event names its last fine hash (``coarse_as_fine``: the
    profile's ``coarse_events_name_fine_hash``), else unchanged. The pool's events stay
    what the pool does (the spec emits whole keys); consumers, and the judges that stand
    for them, read them so.

    post: len(__return__) == len(events)
    """
    return tuple(published(e) for e in events) if coarse_as_fine else events


def canonical_events(events: tuple[Event, ...]) -> tuple[Event, ...]:
    """Events with every run of consecutive ``BlockRemoved`` sorted.

    A block with several keys loses them in no defined order, so removals that come
    together are compared as a multiset; everything else keeps its order.
    """
    out: list[Event] = []
    run: list[BlockRemoved] = []
    for event in events:
        if isinstance(event, BlockRemoved):
            run.append(event)
            continue
        out.extend(sorted(run))
        run = []
        out.append(event)
    out.extend(sorted(run))
    return tuple(out)
