"""The chained block hash and the key layout (block hash + 4-byte group id).

Written independently of ``kvpool.spec``; the two must agree byte for byte.

Canonical encoding (``encode``), one tag byte then the payload, lengths as
4-byte big-endian unsigned:

* ``None`` -> ``N``; ``True``/``False`` -> ``T``/``F``
* ``int`` -> ``I`` + length + ASCII decimal (``-`` when negative)
* ``str`` -> ``S`` + length + UTF-8; ``bytes`` -> ``B`` + length + data
* ``tuple``/``list`` -> ``L`` + item count + the items' encodings

A request's blocks are hashed by :func:`hash_token_blocks`: the same bytes, with no
per-token Python work (each token's encoding is made once and kept, and a block's is
joined in C), which is what the manager's hot path calls.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from itertools import repeat

HashFunction = Callable[[object], bytes]

_U32_LIMIT = 1 << 32


#: Ints whose encodings are kept once made (token ids; a vocabulary is far smaller).
_KEPT_INTS = 1 << 20


def _length(n: int) -> bytes:
    return n.to_bytes(4, "big")


class _IntEncodings(dict[int, bytes]):
    """The encodings of ints (never bools), each made on first use; those of
    ``0 .. _KEPT_INTS - 1`` are kept, so a token id is encoded in Python once per process."""

    __slots__ = ()

    def __missing__(self, value: int) -> bytes:
        digits = str(int(value)).encode("ascii")
        data = b"I" + _length(len(digits)) + digits
        if 0 <= value < _KEPT_INTS:
            self[int(value)] = data
        return data


_INT_ENCODINGS = _IntEncodings()
#: A token's encoding (an int that is not a bool; a dict lookup, run from C by ``map``).
_encode_int = _INT_ENCODINGS.__getitem__


def _encode_into(value: object, out: list[bytes]) -> None:
    # bool is an int subclass: test it first so True never encodes as 1.
    if value is None:
        out.append(b"N")
    elif isinstance(value, bool):
        out.append(b"T" if value else b"F")
    elif isinstance(value, int):
        out.append(_encode_int(value))
    elif isinstance(value, str):
        data = value.encode("utf-8")
        out.append(b"S" + _length(len(data)) + data)
    elif isinstance(value, bytes):
        out.append(b"B" + _length(len(value)) + value)
    elif isinstance(value, tuple | list):
        out.append(b"L" + _length(len(value)))
        if _all_ints(value):
            out.extend(map(_encode_int, value))
        else:
            for item in value:
                _encode_into(item, out)
    else:
        raise TypeError(f"cannot encode a value of type {type(value).__name__} for hashing")


def _all_ints(values: Sequence[object]) -> bool:
    """Whether every item is an ``int`` itself (not a bool, not a subclass): checked in C."""
    return set(map(type, values)) <= {int}


def encode(value: object) -> bytes:
    """The canonical bytes of ``value`` (see the module docstring); TypeError otherwise."""
    out: list[bytes] = []
    _encode_into(value, out)
    return b"".join(out)


def sha256_hash(value: object) -> bytes:
    """SHA-256 of the canonical encoding of ``value`` (32 bytes)."""
    return hashlib.sha256(encode(value)).digest()


DEFAULT_NONE_HASH_SEED = "kvpool-none-hash"

#: The parent hash of a request's first block. Re-seeded by ``init_none_hash``;
#: read it through ``get_none_hash()`` (a ``from ... import NONE_HASH`` copy
#: does not follow re-seeding).
NONE_HASH: bytes = sha256_hash(DEFAULT_NONE_HASH_SEED)


def init_none_hash(seed: str) -> None:
    """Re-seed the module-level ``NONE_HASH`` as ``sha256_hash(seed)``."""
    global NONE_HASH
    if not isinstance(seed, str):
        raise TypeError(f"the none-hash seed must be a str, not {type(seed).__name__}")
    NONE_HASH = sha256_hash(seed)


def get_none_hash() -> bytes:
    """The current ``NONE_HASH``."""
    return NONE_HASH


def hash_block_tokens(
    hash_function: HashFunction,
    parent_block_hash: bytes | None,
    curr_block_token_ids: Sequence[int],
    extra_keys: tuple[object, ...] | None = None,
) -> bytes:
    """The hash of one block, chained on its parent's (``NONE_HASH`` for the first)."""
    parent = NONE_HASH if parent_block_hash is None else parent_block_hash
    return hash_function((parent, tuple(curr_block_token_ids), extra_keys))


#: How a block's hash input ``(parent, tokens, extra_keys)`` begins: a 3-item list, then
#: the parent's ``B`` tag and length (a 32-byte SHA-256 digest, as every parent here is).
_INPUT_HEAD = b"L" + _length(3) + b"B" + _length(32)


def hash_token_blocks(
    parent_block_hash: bytes | None,
    token_ids: Sequence[int],
    block_size: int,
    extra_keys: tuple[object, ...] | None = None,
) -> list[bytes]:
    """The ``sha256_hash`` chained hashes of every full ``block_size`` block of
    ``token_ids``, the first chained on ``parent_block_hash`` (``NONE_HASH`` for
    ``None``), every block with the same ``extra_keys``: equal, block by block, to
    ``hash_block_tokens(sha256_hash, ...)``, with each token's encoding looked up (made
    once per process) and each block's bytes joined in C.

    Pre: every token's type is ``int`` itself (a bool or a float would be looked up as
    the int it equals), as the manager checks them; a trailing partial block gets no hash.
    """
    if type(block_size) is not int or block_size <= 0:  # a bool's type is not int
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    parent = NONE_HASH if parent_block_hash is None else parent_block_hash
    stop = len(token_ids) // block_size * block_size
    if not stop:
        return []
    # Each block's bytes after the parent, made in C: the tokens' list head, the tokens'
    # encodings (looked up), the extra keys' encoding; zip takes block_size at a time.
    tokens = iter(map(_encode_int, token_ids[:stop]))
    tail = b"N" if extra_keys is None else encode(extra_keys)
    bodies = map(
        b"".join, zip(repeat(b"L" + _length(block_size)), *[tokens] * block_size, repeat(tail))
    )
    sha256 = hashlib.sha256
    hashes: list[bytes] = []
    if len(parent) != 32:  # a parent from another hash function: its own length
        head = b"L" + _length(3) + b"B" + _length(len(parent))
        parent = sha256(head + parent + next(bodies)).digest()
        hashes.append(parent)
    head = _INPUT_HEAD
    for body in bodies:
        parent = sha256(head + parent + body).digest()
        hashes.append(parent)
    return hashes


def make_block_hash_with_group_id(block_hash: bytes, group_id: int) -> bytes:
    """The key: ``block_hash`` followed by ``group_id`` as 4 big-endian unsigned bytes."""
    if isinstance(group_id, bool) or not isinstance(group_id, int):
        raise TypeError(f"a group id must be an int, not {type(group_id).__name__}")
    if not 0 <= group_id < _U32_LIMIT:
        raise ValueError(f"group id {group_id} does not fit in 4 unsigned bytes")
    return block_hash + group_id.to_bytes(4, "big")


def get_block_hash(key: bytes) -> bytes:
    """The block hash part of a key."""
    return key[:-4]


def get_group_id(key: bytes) -> int:
    """The group id part of a key."""
    return int.from_bytes(key[-4:], "big")


def request_block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    extra_keys: tuple[object, ...] | None = None,
    hash_function: HashFunction = sha256_hash,
) -> list[bytes]:
    """The chained hashes of every full ``block_size`` block of ``token_ids``.

    ``extra_keys`` (or ``None``) is applied to every block. A trailing partial
    block gets no hash.
    """
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    if hash_function is sha256_hash and _all_ints(token_ids):
        return hash_token_blocks(None, token_ids, block_size, extra_keys)
    hashes: list[bytes] = []
    parent: bytes | None = None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block_tokens(
            hash_function, parent, token_ids[start : start + block_size], extra_keys
        )
        hashes.append(parent)
    return hashes


#: A LoRA adapter as the hash reads it: ``(name, path)``.
LoraKey = tuple[str, str]
#: A multimodal feature as the hash reads it: ``(identifier, offset, length)`` in the prompt.
MultiModalKey = tuple[str, int, int]


def generate_block_hash_extra_keys(
    start: int,
    end: int,
    cache_salt: str | None = None,
    lora: LoraKey | None = None,
    mm_features: Sequence[MultiModalKey] = (),
    prompt_embeds: Sequence[int] | None = None,
) -> tuple[object, ...] | None:
    """The extra keys of the block of tokens ``start .. end - 1``, so that requests that
    differ in any of them never share the block: the salt itself, then
    ``("lora-name", name)``, ``("lora-path", path)``, ``("mm-identifier", ids)`` and
    ``("mm-offset", offsets from the block's start)`` of the features overlapping the
    block, ``("prompt-embeds", the block's embedding values)``, each where present (tokens past
    the prompt have no embeddings);
    ``None`` when there are none."""
    keys: list[object] = []
    if cache_salt is not None:
        keys.append(cache_salt)
    if lora is not None:
        keys.append(("lora-name", lora[0]))
        keys.append(("lora-path", lora[1]))
    inside = [(i, o) for i, o, n in mm_features if o < end and o + n > start]
    if inside:
        keys.append(("mm-identifier", tuple(i for i, _ in inside)))
        keys.append(("mm-offset", tuple(o - start for _, o in inside)))
    rows = () if prompt_embeds is None else tuple(prompt_embeds[start:end])
    if rows:
        keys.append(("prompt-embeds", rows))
    return tuple(keys) or None
