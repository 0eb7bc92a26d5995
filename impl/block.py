"""One KV-cache block: a fixed id, a reference count, an optional key, free-list links."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .block_pool import BlockPool


class KVCacheBlock:
    """A block of the pool.

    ``block_id`` never changes. ``ref_cnt`` counts the holders; a block with
    ``ref_cnt == 0`` sits in its pool's free queue. The primary key
    (``block_hash``: block hash + 4-byte group id) and the number of prefix
    tokens it covers are set together or not at all. The two free-list links are
    both ``None`` exactly when the block is not in a free queue.
    """

    __slots__ = (
        "_block_hash",
        "_block_hash_num_tokens",
        "block_id",
        "is_null",
        "next_free_block",
        "pool",
        "prev_free_block",
        "ref_cnt",
    )

    block_id: int
    ref_cnt: int
    _block_hash: bytes | None
    _block_hash_num_tokens: int | None
    prev_free_block: KVCacheBlock | None
    next_free_block: KVCacheBlock | None
    is_null: bool
    pool: weakref.ref[BlockPool] | None
    def __init__(self, block_id: int, pool: weakref.ref[BlockPool] | None = None) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self._block_hash = None
        self._block_hash_num_tokens = None
        self.prev_free_block = None
        self.next_free_block = None
        self.is_null = False
        self.pool = pool

    @property
    def block_hash(self) -> bytes | None:
        """The primary key (hash + group id), or ``None`` when the block has none."""
        return self._block_hash

    @property
    def block_hash_num_tokens(self) -> int | None:
        """How many prefix tokens the primary key covers (``None`` without a key)."""
        return self._block_hash_num_tokens

    def set_block_hash(self, key: bytes, num_tokens: int) -> None:
        """Give the block its primary key. Pre: it has none."""
        self._block_hash = key
        self._block_hash_num_tokens = num_tokens

    def reset_hash(self) -> None:
        """Forget the primary key (the pool drops the extra keys itself)."""
        self._block_hash = None
        self._block_hash_num_tokens = None

    def __repr__(self) -> str:
        if self.block_id < 0:
            return "KVCacheBlock(sentinel)"
        prev_id = None if self.prev_free_block is None else self.prev_free_block.block_id
        next_id = None if self.next_free_block is None else self.next_free_block.block_id
        key = "none" if self._block_hash is None else self._block_hash.hex()[:12]
        null = ", null" if self.is_null else ""
        return (
            f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt}, key={key}"
            f", prev={prev_id}, next={next_id}{null})"
        )
