"""A pool's KV events read back into the spec's vocabulary: hashes published as 64-bit
integers mapped back to the bytes the pool keyed its blocks by (:mod:`.int_hashes`, the one
mapping of both adapters), and events that name no group given the group from the pool's
own keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvpool.spec import Action, AllBlocksCleared, BlockRemoved, BlockStored, Event
from kvpool.spec.keys import group_of, hash_of

from .int_hashes import IntHashes


class EventReader:
    """What an adapter remembers to read its pool's events: the hashes it handed out and the
    group of each queued event whose pool does not publish one."""

    def __init__(self) -> None:
        #: What each 64-bit integer an event may publish stands for.
        self.int_hashes = IntHashes()
        #: The group of each event in the pool's queue, when its events do not say.
        self.groups: list[int | None] = []

    def hash(self, value: Any, block_size: int | None = None) -> bytes:
        """An event's hash as bytes (:meth:`.IntHashes.bytes_of`)."""
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

    def tag(self, action: Action, new: Iterable[Any], lost: list[tuple[int, bytes]]) -> None:
        """Give each event ``action`` queued (``new``) the group its pool did not publish: a
        store belongs to the caching call's group, a removal to the key the pool lost
        (``lost``: the (block, key) pairs the action took away)."""
        for raw in new:
            kind = type(raw).__name__
            group: int | None = None
            if kind == "BlockStored":
                group = getattr(action, "group_id", None)
            elif kind == "BlockRemoved":
                hashes = [self.hash(h) for h in raw.block_hashes]
                for pair in lost:
                    if hash_of(pair[1]) in hashes:
                        group = group_of(pair[1])
                        lost.remove(pair)
                        break
            self.groups.append(group)
