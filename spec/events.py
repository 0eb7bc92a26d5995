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
