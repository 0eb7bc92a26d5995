"""The prefix-cache multimap: key -> the blocks cached under it, oldest first."""

from __future__ import annotations

from collections.abc import Iterator

from .block import KVCacheBlock

# A key maps to one block in the common case; only a key held by several blocks
# (duplicates are allowed, block tables stay append-only) pays for a dict
# block_id -> block, whose insertion order is the order the entries were made.
_Entry = KVCacheBlock | dict[int, KVCacheBlock]


class BlockHashToBlockMap:
    """Key (block hash + group id) -> blocks, duplicates allowed, insertion order kept."""

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: dict[bytes, _Entry] = {}

    def get_one_block(self, key: bytes) -> KVCacheBlock | None:
        """The earliest-inserted block still present under ``key``, or ``None``."""
        entry = self._map.get(key)
        if entry is None or isinstance(entry, KVCacheBlock):
            return entry
        return next(iter(entry.values()))

    def contain(self, key: bytes, block_id: int) -> bool:
        """Whether block ``block_id`` is cached under ``key``."""
        entry = self._map.get(key)
        if entry is None:
            return False
        if isinstance(entry, KVCacheBlock):
            return entry.block_id == block_id
        return block_id in entry

    def insert(self, key: bytes, block: KVCacheBlock) -> None:
        """Cache ``block`` under ``key``; a new duplicate goes last.

        Inserting a pair that is already present keeps its place.
        """
        entry = self._map.get(key)
        if entry is None:
            self._map[key] = block
        elif isinstance(entry, KVCacheBlock):
            if entry is not block:
                self._map[key] = {entry.block_id: entry, block.block_id: block}
        else:
            entry.setdefault(block.block_id, block)

    def pop(self, key: bytes, block_id: int) -> KVCacheBlock | None:
        """Remove block ``block_id`` from under ``key``; return it, or ``None`` if absent."""
        entry = self._map.get(key)
        if entry is None:
            return None
        if isinstance(entry, KVCacheBlock):
            if entry.block_id != block_id:
                return None
            del self._map[key]
            return entry
        block = entry.pop(block_id, None)
        if block is not None and len(entry) == 1:
            # Back to the cheap single-block form.
            self._map[key] = next(iter(entry.values()))
        return block

    def get_all_blocks(self, key: bytes) -> list[KVCacheBlock]:
        """Every block under ``key``, earliest first."""
        entry = self._map.get(key)
        if entry is None:
            return []
        if isinstance(entry, KVCacheBlock):
            return [entry]
        return list(entry.values())

    def items(self) -> Iterator[tuple[bytes, list[KVCacheBlock]]]:
        """(key, blocks earliest first) for every key (for tests and checks)."""
        for key in list(self._map):
            yield key, self.get_all_blocks(key)

    def clear(self) -> None:
        self._map.clear()

    def __len__(self) -> int:
        """The number of keys."""
        return len(self._map)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __iter__(self) -> Iterator[bytes]:
        return iter(list(self._map))
