"""Hash keys: a block hash with its KV-cache group id.

A key is the block hash followed by the group id as 4 big-endian bytes, so the same
prefix has one independent entry per KV-cache group.
"""

from __future__ import annotations

from collections.abc import Sequence

GROUP_ID_BYTES = 4


def make_key(block_hash: bytes, group_id: int) -> bytes:
    """The key of ``block_hash`` in group ``group_id``."""
    return block_hash + group_id.to_bytes(GROUP_ID_BYTES, "big", signed=False)


def hash_of(key: bytes) -> bytes:
    """The block hash inside ``key``."""
    return key[:-GROUP_ID_BYTES]


def group_of(key: bytes) -> int:
    """The group id inside ``key``."""
    return int.from_bytes(key[-GROUP_ID_BYTES:], "big", signed=False)


def hash_at_block_size(
    block_hashes: Sequence[bytes], hash_block_size: int, block_size: int, index: int
) -> bytes:
    """The hash of block ``index`` when the request is viewed in blocks of ``block_size``.

    ``block_hashes`` are chained at ``hash_block_size`` granularity; each chains over its whole
    prefix, so the last fine hash inside a coarse block names that coarse block's prefix.
    """
    scale = block_size // hash_block_size
    return block_hashes[(index + 1) * scale - 1]


def blocks_viewable(num_hashes: int, hash_block_size: int, block_size: int) -> int:
    """How many blocks of ``block_size`` the request's hashes cover."""
    return num_hashes // (block_size // hash_block_size)
