"""Reading a manager's keys in the spec's hashes: each request's block hashes paired with
the spec's for the same tokens and attributes.

A manager that hashes with its own function (vLLM's ``sha256`` over its own encoding and
``NONE_HASH``) registers keys the spec cannot recompute. Pairing each of a request's hashes
with the spec's hash at the same position (under the profile's partitioning attributes)
lets what its pool shows (keys, index, lookups) be read back in the spec's keys and
compared. Where the manager's hashing is coarser than the spec's (it leaves out an
attribute), two spec hashes meet one of its hashes and the latest pairing wins: the
request-level properties (``keys-partitioned``), not the key comparison, then judge what
is shared.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from kvpool.spec import BlockRemoved, BlockStored, Event
from kvpool.spec.keys import group_of, hash_of, make_key
from kvpool.spec.manager import ExtraKeys
from kvpool.spec.manager.extra_keys import partitioned_block_hashes

from ..pool.target import PoolView


class KeyPairing:
    """The manager's block hashes -> the spec's."""

    def __init__(self, hash_block_size: int, partitions: frozenset[str]) -> None:
        self.hash_block_size = hash_block_size
        self.partitions = partitions
        self.spec_hashes: dict[bytes, bytes] = {}

    def pair(
        self,
        theirs: Sequence[bytes],
        tokens: Sequence[int],
        salt: str | None,
        extra: ExtraKeys,
    ) -> None:
        """Pair a request's hashes (``theirs``, one per full hash block; none where the
        manager does not hash, caching off) with the spec's."""
        if not theirs:
            return
        ours = partitioned_block_hashes(tokens, self.hash_block_size, salt, extra, self.partitions)
        for their, mine in zip(theirs, ours, strict=True):
            self.spec_hashes[bytes(their)] = mine

    def spec_key(self, key: bytes) -> bytes:
        """``key`` in the spec's hash (unchanged when its hash was never paired)."""
        mine = self.spec_hashes.get(hash_of(key))
        return key if mine is None else make_key(mine, group_of(key))

    def view(self, view: PoolView) -> PoolView:
        """``view`` with every key read in the spec's hashes."""
        key = self.spec_key
        keys = None if view.keys is None else tuple(frozenset(map(key, k)) for k in view.keys)
        primary = None
        if view.primary is not None:
            primary = tuple(None if p is None else key(p) for p in view.primary)
        index = None
        if view.index is not None:
            index = tuple(sorted((key(k), blocks) for k, blocks in view.index))
        lookups = None
        if view.lookups is not None:
            lookups = tuple(sorted((key(k), b) for k, b in view.lookups))
        return replace(view, keys=keys, primary=primary, index=index, lookups=lookups)

    def events(self, events: Iterable[Event]) -> tuple[Event, ...]:
        """``events`` with every hash they name read in the spec's hashes."""
        mine = self.spec_hashes
        shown: list[Event] = []
        for event in events:
            if isinstance(event, BlockStored):
                parent = event.parent_block_hash
                event = replace(
                    event,
                    block_hashes=tuple(mine.get(h, h) for h in event.block_hashes),
                    parent_block_hash=None if parent is None else mine.get(parent, parent),
                )
            elif isinstance(event, BlockRemoved):
                event = replace(event, block_hash=mine.get(event.block_hash, event.block_hash))
            shown.append(event)
        return tuple(shown)
