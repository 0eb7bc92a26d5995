"""The chained block hash, written plainly.

A block's hash covers its whole prefix: ``H(parent or NONE_HASH, tokens of the block,
extra_keys)``. ``extra_keys`` carry what the tokens do not (multimodal ids, LoRA, a
``cache_salt``), so equal tokens with a different salt never share a block. ``H`` is SHA-256
over a small canonical encoding, defined here so that any implementation can match it
byte for byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HashInput = None | bool | int | str | bytes | tuple["HashInput", ...] | list["HashInput"]

DEFAULT_NONE_HASH_SEED = "kvpool-none-hash"


def _length(n: int) -> bytes:
    return n.to_bytes(4, "big")


def encode(value: HashInput) -> bytes:
    """The canonical bytes of ``value``.

    None -> ``N``; booleans -> ``T`` / ``F``; an int -> ``I`` + length + decimal digits;
    a str -> ``S`` + length + UTF-8; bytes -> ``B`` + length + data; a tuple or list ->
    ``L`` + item count + the items' encodings. Lengths are 4 bytes, big-endian.
    """
    if value is None:
        return b"N"
    if isinstance(value, bool):
        return b"T" if value else b"F"
    if isinstance(value, int):
        digits = str(value).encode("ascii")
        return b"I" + _length(len(digits)) + digits
    if isinstance(value, str):
        data = value.encode("utf-8")
        return b"S" + _length(len(data)) + data
    if isinstance(value, bytes):
        return b"B" + _length(len(value)) + value
    if isinstance(value, tuple | list):
        return b"L" + _length(len(value)) + b"".join(encode(item) for item in value)
    raise TypeError(f"cannot hash a value of type {type(value).__name__}")


def sha256_hash(value: HashInput) -> bytes:
    """SHA-256 of the canonical encoding of ``value``."""
    return hashlib.sha256(encode(value)).digest()


def none_hash(seed: str = DEFAULT_NONE_HASH_SEED) -> bytes:
    """The parent hash of every first block, derived from ``seed``."""
    return sha256_hash(seed)


def hash_block_tokens(
    parent_block_hash: bytes | None,
    token_ids: Sequence[int],
    extra_keys: tuple[HashInput, ...] | None = None,
    seed: str = DEFAULT_NONE_HASH_SEED,
) -> bytes:
    """The hash of one full block, chained to its parent (``None`` for the first block)."""
    parent = none_hash(seed) if parent_block_hash is None else parent_block_hash
    return sha256_hash((parent, tuple(token_ids), extra_keys))


def request_block_hashes(
    token_ids: Sequence[int],
    hash_block_size: int,
    extra_keys: tuple[HashInput, ...] | None = None,
    seed: str = DEFAULT_NONE_HASH_SEED,
) -> tuple[bytes, ...]:
    """The chained hashes of every full block of ``token_ids`` (a partial tail has none)."""
    hashes: list[bytes] = []
    parent: bytes | None = None
    for start in range(0, len(token_ids) - hash_block_size + 1, hash_block_size):
        parent = hash_block_tokens(
            parent, token_ids[start : start + hash_block_size], extra_keys, seed
        )
        hashes.append(parent)
    return tuple(hashes)
