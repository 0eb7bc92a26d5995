"""Reading a pool's prefix-cache index: the hash -> blocks multimap a lookup answers from.

Every generation of vLLM's pool keeps it as ``cached_block_hash_to_block``: a plain dict of
key -> {block id: block} (0.10), then a ``BlockHashToBlockMap`` whose ``_cache`` holds a
block, or a dict of blocks once a key has duplicates; a pool of its own may hold a list of
blocks per key. Ours keeps one table per group
(``by_group``: group -> block hash -> entry). A key is the block hash followed by the
group id in 4 big-endian bytes, the layout the spec uses, so keys are compared as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvpool.spec.keys import make_key

from ..engine.target import Index


def _blocks_of(entry: Any) -> tuple[int, ...]:
    """The block ids of one entry, in the order a lookup sees them (the first one wins):
    one block, a dict of blocks (vLLM), or a list or tuple of blocks (a pool written from
    the docs)."""
    if type(entry) is dict or isinstance(entry, Mapping):  # a plain dict: no ABC check
        return tuple(int(block.block_id) for block in entry.values())
    if isinstance(entry, list | tuple):
        return tuple(int(block.block_id) for block in entry)
    return (int(entry.block_id),)


def read_index(table: Any, key_of: Callable[[bytes], bytes] = bytes) -> Index | None:
    """The index held by ``table`` (``None`` when its layout is not one we know).

    ``key_of`` turns the pool's key into the spec's (the identity for vLLM's layout).
    Keys whose entry lists no block are kept, with no blocks: an empty entry a lookup
    still finds is a difference too.
    """
    pairs: list[tuple[bytes, tuple[int, ...]]] = []
    by_group = getattr(table, "by_group", None)
    if isinstance(by_group, Mapping):
        for group, entries in by_group.items():
            for block_hash, entry in entries.items():
                pairs.append((make_key(bytes(block_hash), int(group)), _blocks_of(entry)))
        return tuple(sorted(pairs))
    entries = getattr(table, "_cache", table)
    if not isinstance(entries, Mapping):
        return None
    for key, entry in entries.items():
        if not isinstance(key, bytes | bytearray | memoryview):
            return None
        pairs.append((key_of(bytes(key)), _blocks_of(entry)))
    return tuple(sorted(pairs))
