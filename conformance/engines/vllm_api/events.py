"""A pool's KV events read back into the spec's vocabulary: hashes published as 64-bit
integers mapped back to the bytes the pool keyed its blocks by (:mod:`.int_hashes`, the one
mapping of both adapters), and events that name no group given the group from the pool's
own keys. Where the profile states what a consumer of those integers sees
(``coarse_events_name_fine_hash``), no such mapping is made: every hash is read as that
consumer reads it, a coarse key as its last fine hash.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvpool.spec import AllBlocksCleared, BlockRemoved, BlockStored, Event
from kvpool.spec.events import as_fine
from kvpool.spec.keys import group_of, hash_of

from .int_hashes import IntHashes


class EventReader:
    """What an adapter remembers to read its pool's events: the hashes it handed out and the
    group of each queued event whose pool does not publish one."""

    def __init__(self, coarse_as_fine: bool = False) -> None:
        #: The profile's ``coarse_events_name_fine_hash``: every hash is read as a consumer
        #: of 64-bit integers reads it, a coarse key as its last fine hash (an integer maps
        #: to the fine hash it names, a concatenation of bytes to its last fine hash).
        self.coarse_as_fine = coarse_as_fine
        #: Whether an event read so far named a hash by an integer (``None``: none read).
        self.saw_ints: bool | None = None
        #: What each 64-bit integer an event may publish stands for.
        self.int_hashes = IntHashes()
        #: The group of each event in the pool's queue, when its events do not say.
        self.groups: list[int | None] = []

    def hash(self, value: Any, block_size: int | None = None) -> bytes:
        """An event's hash as bytes (:meth:`.IntHashes.bytes_of`), or as a consumer of
        integers reads it where the profile says so."""
        is_int = isinstance(value, int) and not isinstance(value, bool)
        self.saw_ints = is_int
        if self.coarse_as_fine:
            if isinstance(value, int) and is_int:
                return self.int_hashes.fine.get(value, value.to_bytes(8, "big"))
            return as_fine(bytes(value))
        return self.int_hashes.bytes_of(value, block_size)

    def spec_events(self, raw: Any, tagged_group: int | None) -> list[Event]:
        """One pool event in the spec's vocabulary (a removal of k keys becomes k events)."""
        kind = type(raw).__name__
        group = getattr(raw, "group_idx", None)
        if group is None:
            group = tagged_group if tagged_group is not None else 0
        if kind == "BlockStored":
            parent = raw.parent_block_hash
            return [
                BlockStored(
                    block_hashes=tuple(self.hash(h, raw.block_size) for h in raw.block_hashes),
                    parent_block_hash=None if parent is None else self.hash(parent),
                    group_id=group,
                    block_size=raw.block_size,
                    num_tokens=len(raw.token_ids),
                )
            ]
        if kind == "BlockRemoved":
            return [BlockRemoved(self.hash(h), group) for h in raw.block_hashes]
        if kind == "AllBlocksCleared":
            return [AllBlocksCleared()]
        raise TypeError(f"unknown KV event type {kind}")

    def tag(
        self,
        new: Iterable[Any],
        lost: list[tuple[int, bytes]],
        *,
        store_group: int | None = None,
        gained: list[tuple[int, bytes]] | None = None,
    ) -> None:
        """Give each event a call queued (``new``) the group its pool did not publish: a
        removal belongs to the key the pool lost (``lost``: the (block, key) pairs the call
        took away), a store to the caching call's group (``store_group``, when the adapter
        made the call itself) or else to the key the pool gained under the stored hashes
        (``gained``: the pairs the call added, when a manager above the pool made it)."""
        for raw in new:
            kind = type(raw).__name__
            group: int | None = None
            if kind == "BlockStored":
                group = store_group
                if group is None and gained is not None:
                    group = _take_group(
                        gained, {self.hash(h, raw.block_size) for h in raw.block_hashes}
                    )
            elif kind == "BlockRemoved":
                group = _take_group(lost, {self.hash(h) for h in raw.block_hashes}, every=False)
            self.groups.append(group)


def _take_group(
    pairs: list[tuple[int, bytes]], hashes: set[bytes], every: bool = True
) -> int | None:
    """The group of a (block, key) pair whose hash is among ``hashes``, taken out of
    ``pairs``; ``None`` when no pair has one. For a store (``every``): the lowest such
    group, and all of that group's pairs under those hashes (one store event covers a
    group's blocks, and a manager caches its groups in group order, so when several groups
    gained the hash the first store is the lowest group's). For a removal: the first pair
    (the pool's order of its blocks), as the pool adapter has always read them."""
    matching = [pair for pair in pairs if hash_of(pair[1]) in hashes]
    if not matching:
        return None
    found = min(matching, key=lambda pair: group_of(pair[1])) if every else matching[0]
    group = group_of(found[1])
    taken = [
        pair
        for pair in pairs
        if pair is found or (every and group_of(pair[1]) == group and hash_of(pair[1]) in hashes)
    ]
    for pair in taken:
        pairs.remove(pair)
    return group
