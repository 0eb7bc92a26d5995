"""Hash keys: a block hash with its KV-cache group id.

A key is the block hash followed by the group id as 4 big-endian bytes, so the same
prefix has one independent entry per KV-cache group.
"""

from __future__ import annotations

from collections.abc import Sequence

# the contracts' search bounds, read by CrossHair from the pre: lines
from .bounds import search_hash_bytes, search_hashes, search_sizes  # noqa: F401
from .flat import coarse_blocks, fine_hash_index

GROUP_ID_BYTES = 4


def make_key(block_hash: bytes, group_id: int) -> bytes:
    """The key of ``block_hash`` in group ``group_id``.

    pre: 0 <= group_id < 2**32
    pre: search_hash_bytes(len(block_hash))
    post: len(__return__) == len(block_hash) + GROUP_ID_BYTES
    post: hash_of(__return__) == block_hash
    post: group_of(__return__) == group_id
    """
    return block_hash + group_id.to_bytes(GROUP_ID_BYTES, "big", signed=False)


def hash_of(key: bytes) -> bytes:
    """The block hash inside ``key``.

    pre: GROUP_ID_BYTES <= len(key)
    pre: search_hash_bytes(len(key) - GROUP_ID_BYTES)
    post: make_key(__return__, group_of(key)) == key
    """
    return key[:-GROUP_ID_BYTES]


def group_of(key: bytes) -> int:
    """The group id inside ``key``.

    pre: GROUP_ID_BYTES <= len(key)
    pre: search_hash_bytes(len(key) - GROUP_ID_BYTES)
    post: 0 <= __return__ < 2**32
    """
    return int.from_bytes(key[-GROUP_ID_BYTES:], "big", signed=False)


def hash_at_block_size(
    block_hashes: Sequence[bytes], hash_block_size: int, block_size: int, index: int
) -> bytes:
    """The hash of block ``index`` when the request is viewed in blocks of ``block_size``.

    ``block_hashes`` are chained at ``hash_block_size`` granularity; each chains over its whole
    prefix, so the last fine hash inside a coarse block names that coarse block's prefix.

    pre: 1 <= hash_block_size and 1 <= block_size
    pre: search_sizes(hash_block_size, block_size)
    pre: block_size % hash_block_size == 0
    pre: 0 <= index < blocks_viewable(len(block_hashes), hash_block_size, block_size)
    post: __return__ in block_hashes
    """
    return block_hashes[fine_hash_index(hash_block_size, block_size, index)]


def blocks_viewable(num_hashes: int, hash_block_size: int, block_size: int) -> int:
    """How many blocks of ``block_size`` the request's hashes cover.

    pre: 0 <= num_hashes
    pre: search_hashes(num_hashes)
    pre: 1 <= hash_block_size and 1 <= block_size
    pre: search_sizes(hash_block_size, block_size)
    pre: block_size % hash_block_size == 0
    post: 0 <= __return__ <= num_hashes
    """
    return coarse_blocks(num_hashes, hash_block_size, block_size)
