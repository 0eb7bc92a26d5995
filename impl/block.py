"""One KV-cache block: a fixed id, a reference count, an optional key, free-list links."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from .hashing import get_block_hash, get_group_id

if TYPE_CHECKING:
    from .block_pool import BlockPool

#: The 4-byte key suffixes of the first group ids, made once (keys are rebuilt on reads).
_NUM_SUFFIXES = 64
_GROUP_SUFFIXES = tuple(g.to_bytes(4, "big") for g in range(_NUM_SUFFIXES))


def group_suffix(group: int) -> bytes:
    """The 4 bytes a key ends with for KV cache group ``group``."""
    return _GROUP_SUFFIXES[group] if 0 <= group < _NUM_SUFFIXES else group.to_bytes(4, "big")


class PoolRef:
    """A block's weak link to the pool it belongs to, which also says whether it is that
    pool's null block. Calling it gives the pool, or ``None`` once the pool is gone.

    A pool makes two: one shared by all its blocks and one for its null block. The pool
    tells its own blocks by the identity of the shared one (no read of the block id), and
    a block does not keep a dropped pool alive.
    """

    __slots__ = ("_pool", "null")

    _pool: weakref.ref[BlockPool]
    null: bool

    def __init__(self, pool: BlockPool, null: bool) -> None:
        self._pool = weakref.ref(pool)
        self.null = null

    def __call__(self) -> BlockPool | None:
        return self._pool()


class KVCacheBlock:
    """A block of the pool.

    ``block_id`` never changes. ``ref_cnt`` counts the holders; a block with
    ``ref_cnt == 0`` sits in its pool's free queue. ``pool`` links it (weakly) to
    its pool and marks the null block. The primary key (block hash + 4-byte group
    id, read as ``block_hash``) is kept as its two parts: the request's own block
    hash object (``_key_hash``) and the group id (``_key_group``), so that caching
    a block allocates no key and a lookup with the request's hash finds it without
    building one. The key and the number of prefix tokens it covers are set
    together or not at all. The two free-list links are both ``None`` exactly
    when the block is not in a free queue.
    """

    __slots__ = (
        "_block_hash_num_tokens",
        "_key_group",
        "_key_hash",
        "block_id",
        "next_free_block",
        "pool",
        "prev_free_block",
        "ref_cnt",
    )

    block_id: int
    ref_cnt: int
    _key_hash: bytes | None
    _key_group: int
    _block_hash_num_tokens: int | None
    prev_free_block: KVCacheBlock | None
    next_free_block: KVCacheBlock | None
    pool: PoolRef | None

    def __init__(self, block_id: int, pool: PoolRef | None = None) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self._key_hash = None
        self._key_group = 0
        self._block_hash_num_tokens = None
        self.prev_free_block = None
        self.next_free_block = None
        self.pool = pool

    @property
    def is_null(self) -> bool:
        """Whether this is a pool's null block (a placeholder never handed out)."""
        ref = self.pool
        return ref is not None and ref.null

    @property
    def block_hash(self) -> bytes | None:
        """The primary key (hash + group id), or ``None`` when the block has none."""
        key_hash = self._key_hash
        if key_hash is None:
            return None
        return key_hash + group_suffix(self._key_group)

    @property
    def block_hash_num_tokens(self) -> int | None:
        """How many prefix tokens the primary key covers (``None`` without a key)."""
        return self._block_hash_num_tokens

    def set_block_hash(self, key: bytes, num_tokens: int) -> None:
        """Give the block its primary key (hash + 4-byte group id). Pre: it has none."""
        self.set_key(get_block_hash(key), get_group_id(key), num_tokens)

    def set_key(self, block_hash: bytes, group: int, num_tokens: int) -> None:
        """Give the block its primary key as its parts. Pre: it has none."""
        self._key_hash = block_hash
        self._key_group = group
        self._block_hash_num_tokens = num_tokens

    def reset_hash(self) -> None:
        """Forget the primary key (the pool drops the extra keys itself)."""
        self._key_hash = None
        self._block_hash_num_tokens = None

    def __repr__(self) -> str:
        if self.block_id < 0:
            return "KVCacheBlock(sentinel)"
        prev_id = None if self.prev_free_block is None else self.prev_free_block.block_id
        next_id = None if self.next_free_block is None else self.next_free_block.block_id
        key = self.block_hash
        shown = "none" if key is None else key.hex()[:12]
        null = ", null" if self.is_null else ""
        return (
            f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt}, key={shown}"
            f", prev={prev_id}, next={next_id}{null})"
        )
