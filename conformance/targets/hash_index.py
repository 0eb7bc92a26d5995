"""Reading a pool's prefix-cache index: the hash -> blocks multimap a lookup answers from.

Every generation of vLLM's pool keeps it as ``cached_block_hash_to_block``: a plain dict of
key -> {block id: block} (0.10), then a ``BlockHashToBlockMap`` whose ``_cache`` holds a
block, or a dict of blocks once a key has duplicates, and from 0.34 one whose ``_cache``
holds a block id per key, every id of a key cached by several blocks kept apart in
``_dup_ids`` (in the order a lookup takes them); a pool of its own may hold a list of
blocks per key. Ours keeps one table per group
(``by_group``: group -> block hash -> entry). A key is the block hash followed by the
group id in 4 big-endian bytes, the layout the spec uses, so keys are compared as they are.

These readers are a fast path: any other layout (or one that changed under a known name)
reads as ``None``, never as an error, and the adapter then reads the index through the
pool's own lookups (:mod:`.index_probe`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvpool.spec.keys import make_key

from ..machines.pool.target import Index


class UnknownLayout(Exception):
    """An entry of a shape no reader here knows."""


def _block_id(block: Any) -> int:
    block_id = getattr(block, "block_id", None)
    if type(block_id) is not int:
        raise UnknownLayout(f"an entry holds {type(block).__name__}, not a block")
    return block_id


def _blocks_of(entry: Any) -> tuple[int, ...]:
    """The block ids of one entry, in the order a lookup sees them (the first one wins):
    one block, a dict of blocks (vLLM), or a list or tuple of blocks (a pool written from
    the docs)."""
    if type(entry) is dict or isinstance(entry, Mapping):  # a plain dict: no ABC check
        return tuple(_block_id(block) for block in entry.values())
    if isinstance(entry, list | tuple):
        return tuple(_block_id(block) for block in entry)
    return (_block_id(entry),)


def _ids_of(key: Any, entry: Any, duplicates: Mapping[Any, Any]) -> tuple[int, ...]:
    """The block ids of one key of an index holding ids (vLLM 0.34): its duplicates' ids
    in order when it has several, else its one id."""
    if type(entry) is not int:
        raise UnknownLayout(f"an id index holds {type(entry).__name__}")
    several = duplicates.get(key)
    if several is None:
        return (entry,)
    ids = tuple(several)
    if not ids or ids[0] != entry or not all(type(i) is int for i in ids):
        raise UnknownLayout("an id index whose duplicates disagree with its entry")
    return ids


def read_index(table: Any, key_of: Callable[[bytes], bytes] = bytes) -> Index | None:
    """The index held by ``table`` (``None`` when its layout is not one we know).

    ``key_of`` turns the pool's key into the spec's (the identity for vLLM's layout).
    Keys whose entry lists no block are kept, with no blocks: an empty entry a lookup
    still finds is a difference too.
    """
    try:
        return _read(table, key_of)
    except (UnknownLayout, AttributeError, TypeError, ValueError):
        return None


def _read(table: Any, key_of: Callable[[bytes], bytes]) -> Index | None:
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
    duplicates = getattr(table, "_dup_ids", None)
    if duplicates is not None and not isinstance(duplicates, Mapping):
        return None
    for key, entry in entries.items():
        if not isinstance(key, bytes | bytearray | memoryview):
            return None
        if duplicates is not None:
            pairs.append((key_of(bytes(key)), _ids_of(key, entry, duplicates)))
        else:
            pairs.append((key_of(bytes(key)), _blocks_of(entry)))
    if duplicates is not None and not set(duplicates) <= set(entries):
        return None  # a duplicate list of a key that has no entry: not the layout we know
    return tuple(sorted(pairs))
