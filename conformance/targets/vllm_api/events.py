"""A pool's KV events read back into the spec's vocabulary: hashes published as 64-bit
integers mapped back to the bytes the pool keyed its blocks by, and events that name no
group given the group from the pool's own keys.

An integer is the low 64 bits of a hash, so it names a fine hash (one per hash block) and,
in releases that key a block spanning several hash blocks by their hashes concatenated
(vLLM 0.12-0.23), the concatenation ending in that fine hash alike. The reader keeps what
the pool actually keyed each coarse block by (read off the blocks after each caching call)
and maps a stored block's integer by the event's ``block_size``; a removal's integer maps to
the key the pool registered under it. Where the profile states what a consumer of those
integers sees (``coarse_events_name_fine_hash``), no such mapping is made: every hash is
read as that consumer reads it, a coarse key as its last fine hash.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvpool.spec import Action, AllBlocksCleared, BlockRemoved, BlockStored, Event
from kvpool.spec.events import as_fine
from kvpool.spec.keys import group_of, hash_of

#: vLLM publishes event hashes as the low 64 bits of the hash, big-endian, by default.
INT_HASH_MASK = (1 << 64) - 1


def int_hash(block_hash: bytes) -> int:
    return int.from_bytes(block_hash, "big") & INT_HASH_MASK


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
        #: Hashes the pool was given, by the 64-bit integer vLLM publishes for each.
        self.hashes_by_int: dict[int, bytes] = {}
        #: The group of each event in the pool's queue, when its events do not say.
        self.groups: list[int | None] = []
        #: The hashes the pool keyed blocks spanning several hash blocks by, by (the
        #: integer published for each, the block size), the latest registration kept.
        self.coarse_by_int: dict[tuple[int, int], bytes] = {}

    def remember(self, hashes: Iterable[bytes]) -> None:
        for h in hashes:
            self.hashes_by_int[int_hash(h)] = h

    def remember_coarse(self, block_size: int, hashes: Iterable[bytes]) -> None:
        """The hashes the pool keyed blocks of ``block_size`` tokens by (more than one hash
        block each): the concatenation of their fine hashes in vLLM 0.12-0.23, the last fine
        hash elsewhere."""
        for h in hashes:
            self.coarse_by_int[(int_hash(h), block_size)] = h

    def hash(self, value: Any, block_size: int | None = None) -> bytes:
        """An event's hash as bytes: vLLM publishes the low 64 bits as an int by default.
        ``block_size``: the stored block's size, which tells a coarse key from the fine
        hash its integer shares; ``None`` (a removal): the coarse key registered under
        that integer, if one was."""
        self.saw_ints = isinstance(value, int) and not isinstance(value, bool)
        if self.coarse_as_fine:
            if isinstance(value, int) and not isinstance(value, bool):
                return self.hashes_by_int.get(value, value.to_bytes(8, "big"))
            return as_fine(bytes(value))
        if isinstance(value, int) and not isinstance(value, bool):
            if block_size is not None:
                coarse = self.coarse_by_int.get((value, block_size))
            else:
                coarse = next((h for (i, _), h in self.coarse_by_int.items() if i == value), None)
            if coarse is not None:
                return coarse
            return self.hashes_by_int.get(value, value.to_bytes(8, "big"))
        return bytes(value)

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
