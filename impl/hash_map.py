"""The prefix-cache multimap: key -> the blocks cached under it, oldest first.

A key is a block hash plus a 4-byte group id. The map keeps one table per group, keyed by
the block hash itself, so a lookup with a request's hash builds no key: the hash object the
request carries (whose hash value Python caches) is the dict key. ``by_group`` is that
table of tables, exposed for the pool's lookup, and ``group0`` the table of group 0 (most
models have a single KV cache group, id 0), which always exists and is never replaced. The
methods taking ``(block_hash, group)`` are the pool's; those taking a whole key keep vLLM's
shape for callers and tests.
"""

from __future__ import annotations

from collections.abc import Iterator

from .block import KVCacheBlock, group_suffix
from .hashing import get_block_hash, get_group_id

# A key maps to one block in the common case; only a key held by several blocks
# (duplicates are allowed, block tables stay append-only) pays for a dict
# block_id -> block, whose insertion order is the order the entries were made.
_Entry = KVCacheBlock | dict[int, KVCacheBlock]


class BlockHashToBlockMap:
    """Key (block hash + group id) -> blocks, duplicates allowed, insertion order kept."""

    __slots__ = ("by_group", "group0")

    def __init__(self) -> None:
        #: group id -> (block hash -> entry). Read it; change it only through the methods.
        self.group0: dict[bytes, _Entry] = {}
        self.by_group: dict[int, dict[bytes, _Entry]] = {0: self.group0}

    # ------------------------------------------------------- by hash and group

    def first(self, block_hash: bytes, group: int) -> KVCacheBlock | None:
        """The earliest-inserted block still cached under ``block_hash`` in ``group``."""
        table = self.by_group.get(group)
        if table is None:
            return None
        entry = table.get(block_hash)
        if entry is None or isinstance(entry, KVCacheBlock):
            return entry
        return next(iter(entry.values()))

    def holds(self, block_hash: bytes, group: int, block_id: int) -> bool:
        """Whether block ``block_id`` is cached under ``block_hash`` in ``group``."""
        table = self.by_group.get(group)
        entry = None if table is None else table.get(block_hash)
        if entry is None:
            return False
        if isinstance(entry, KVCacheBlock):
            return entry.block_id == block_id
        return block_id in entry

    def add(self, block_hash: bytes, group: int, block: KVCacheBlock) -> None:
        """Cache ``block`` under ``block_hash`` in ``group``; a new duplicate goes last.

        Adding a pair that is already present keeps its place.
        """
        table = self.by_group.get(group)
        if table is None:
            table = self.by_group[group] = {}
        entry = table.get(block_hash)
        if entry is None:
            table[block_hash] = block
        elif isinstance(entry, KVCacheBlock):
            if entry is not block:
                table[block_hash] = {entry.block_id: entry, block.block_id: block}
        else:
            entry.setdefault(block.block_id, block)

    def discard(self, block_hash: bytes, group: int, block: KVCacheBlock) -> bool:
        """Remove ``block`` (this very object) from under ``block_hash`` in ``group``;
        whether it was there."""
        table = self.by_group.get(group)
        entry = None if table is None else table.get(block_hash)
        if entry is None or table is None:
            return False
        if entry is block:
            del table[block_hash]
            return True
        if isinstance(entry, KVCacheBlock) or entry.get(block.block_id) is not block:
            return False
        del entry[block.block_id]
        if len(entry) == 1:
            # Back to the cheap single-block form.
            table[block_hash] = next(iter(entry.values()))
        return True

    def blocks_under(self, block_hash: bytes, group: int) -> list[KVCacheBlock]:
        """Every block under ``block_hash`` in ``group``, earliest first."""
        table = self.by_group.get(group)
        entry = None if table is None else table.get(block_hash)
        if entry is None:
            return []
        if isinstance(entry, KVCacheBlock):
            return [entry]
        return list(entry.values())

    # ------------------------------------------------------------- by whole key

    def get_one_block(self, key: bytes) -> KVCacheBlock | None:
        """The earliest-inserted block still present under ``key``, or ``None``."""
        return self.first(get_block_hash(key), get_group_id(key))

    def contain(self, key: bytes, block_id: int) -> bool:
        """Whether block ``block_id`` is cached under ``key``."""
        return self.holds(get_block_hash(key), get_group_id(key), block_id)

    def insert(self, key: bytes, block: KVCacheBlock) -> None:
        """Cache ``block`` under ``key`` (see :meth:`add`)."""
        self.add(get_block_hash(key), get_group_id(key), block)

    def pop(self, key: bytes, block_id: int) -> KVCacheBlock | None:
        """Remove block ``block_id`` from under ``key``; return it, or ``None`` if absent."""
        block_hash, group = get_block_hash(key), get_group_id(key)
        for block in self.blocks_under(block_hash, group):
            if block.block_id == block_id:
                self.discard(block_hash, group, block)
                return block
        return None

    def get_all_blocks(self, key: bytes) -> list[KVCacheBlock]:
        """Every block under ``key``, earliest first."""
        return self.blocks_under(get_block_hash(key), get_group_id(key))

    def items(self) -> Iterator[tuple[bytes, list[KVCacheBlock]]]:
        """(key, blocks earliest first) for every key (for tests and checks)."""
        for key in list(self):
            yield key, self.get_all_blocks(key)

    def clear(self) -> None:
        self.group0.clear()
        self.by_group.clear()
        self.by_group[0] = self.group0

    def __len__(self) -> int:
        """The number of keys."""
        return sum(len(table) for table in self.by_group.values())

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, bytes) or len(key) < 4:
            return False
        table = self.by_group.get(get_group_id(key))
        return table is not None and get_block_hash(key) in table

    def __iter__(self) -> Iterator[bytes]:
        keys = [
            block_hash + group_suffix(group)
            for group, table in self.by_group.items()
            for block_hash in table
        ]
        return iter(keys)
