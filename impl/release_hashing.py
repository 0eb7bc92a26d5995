"""Block hashes as a vLLM release computes them: an option of :class:`KVCacheManager`.

The spec's canonical encoding (:mod:`.hashing`) stays the manager's default and the
reference. ``KVCacheManager(..., hashing=vllm_hashing("0.33.0"))`` instead gives every
block the hash the named release gives it, byte for byte, so our manager's keys can be
shared with (or compared against) a vLLM deployment's. What a release hashes is its
documented block-hash input, the triple ``(parent hash, the block's tokens as a tuple,
extra keys or None)``, digested by the algorithm its ``prefix_caching_hash_algo`` names:

* ``sha256``: SHA-256 of the triple pickled at the highest protocol (vLLM's default);
* ``sha256_cbor``: SHA-256 of the triple's canonical CBOR (cbor2's C encoder);
* ``xxhash`` / ``xxhash_cbor``: the same encodings into xxHash's 128-bit XXH3 (0.19 on;
  needs the ``xxhash`` package).

Releases differ in the extra keys (:class:`KeyLayout`) and in the parent of a request's
first block (``NONE_HASH``): up to 0.24 it is random per process unless
``PYTHONHASHSEED`` is set (then the digest of that string); from 0.30 on it is the digest
of ``PYTHONHASHSEED`` or, for the two SHA-256 algorithms, of ``"vllm-none-hash"``. Where
it is random, pass the release's value (its ``kv_cache_utils.NONE_HASH``) as
``none_hash``.

Checked against the wheels of 0.12.0, 0.19.0, 0.24.0, 0.30.0, 0.31.0 and 0.33.0 (their
``kv_cache_utils.py`` and ``utils/hashing.py``); tests call those releases' own functions
on the same inputs. A version between two checked releases that differ is refused, with
the checked ones named: pass ``layout`` and ``none_hash`` yourself.

Known differences, both in how a release resumes hashing when a request grows (the
blocks of one prompt always agree): before 0.31 a resumed block looks only at the last
multimodal feature, and 0.12 also keys the block that starts where that feature ends.
"""

from __future__ import annotations

import enum
import hashlib
import os
import pickle
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import cbor2

from .hashing import HashFunction, LoraKey, MultiModalKey

#: The algorithms a release's ``prefix_caching_hash_algo`` names.
ALGORITHMS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
#: The seed of ``NONE_HASH`` from 0.30 on when ``PYTHONHASHSEED`` is not set (SHA-256 only).
RELEASE_NONE_HASH_SEED = "vllm-none-hash"

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_sha256 = hashlib.sha256
_pickled = pickle.dumps
_cbor = cbor2.dumps


def pickle_sha256(value: object) -> bytes:
    """``sha256``: SHA-256 of ``value`` pickled at the highest protocol."""
    return _sha256(_pickled(value, _PROTOCOL)).digest()


def cbor_sha256(value: object) -> bytes:
    """``sha256_cbor``: SHA-256 of ``value``'s canonical CBOR."""
    return _sha256(_cbor(value, canonical=True)).digest()


def _xxh3_128() -> Callable[[bytes], bytes]:
    try:
        import xxhash  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ValueError(
            "the xxhash algorithms need the xxhash package (pip install xxhash)"
        ) from None
    digest: Callable[[bytes], bytes] = xxhash.xxh3_128_digest
    return digest


def pickle_xxh3(value: object) -> bytes:
    """``xxhash``: XXH3-128 of ``value`` pickled at the highest protocol."""
    return _xxh3_128()(_pickled(value, _PROTOCOL))


def cbor_xxh3(value: object) -> bytes:
    """``xxhash_cbor``: XXH3-128 of ``value``'s canonical CBOR."""
    return _xxh3_128()(_cbor(value, canonical=True))


DIGESTS: dict[str, HashFunction] = {
    "sha256": pickle_sha256,
    "sha256_cbor": cbor_sha256,
    "xxhash": pickle_xxh3,
    "xxhash_cbor": cbor_xxh3,
}


class KeyLayout(enum.Enum):
    """How a release lays out a block's extra keys, named by the first checked release.

    Every layout lists, in this order, the LoRA adapter, the multimodal features that
    overlap the block, the salt (first block only, when non-empty) and the block's prompt
    embeddings (read as big-endian 64-bit rows, as the suite's stand-in tensor gives them):

    * ``BARE`` (0.12): the adapter's name, each feature's identifier, the salt, the rows'
      bytes;
    * ``OFFSETS`` (0.19): as ``BARE``, but each feature as ``(identifier, its offset from
      the block's start)`` and the rows as their SHA-256;
    * ``TAGGED`` (0.31): ``("lora", name, path)``, ``("mm", identifier, offset)``,
      ``("cache_salt", salt)``, ``("prompt_embeds", SHA-256 of the rows)``.
    """

    BARE = "0.12"
    OFFSETS = "0.19"
    TAGGED = "0.31"


@dataclass(frozen=True)
class _Release:
    layout: KeyLayout
    #: ``NONE_HASH`` is random per process unless ``PYTHONHASHSEED`` is set.
    random_none_hash: bool
    algorithms: tuple[str, ...]


#: The releases whose hashing was read in their wheels, oldest first.
CHECKED: dict[tuple[int, int], _Release] = {
    (0, 12): _Release(KeyLayout.BARE, True, ALGORITHMS[:2]),
    (0, 19): _Release(KeyLayout.OFFSETS, True, ALGORITHMS),
    (0, 24): _Release(KeyLayout.OFFSETS, True, ALGORITHMS),
    (0, 30): _Release(KeyLayout.OFFSETS, False, ALGORITHMS),
    (0, 31): _Release(KeyLayout.TAGGED, False, ALGORITHMS),
    (0, 33): _Release(KeyLayout.TAGGED, False, ALGORITHMS),
}


def _release(version: str) -> _Release:
    """What the checked releases say of ``version`` (``X.Y`` or ``X.Y.Z...``): its minor
    release's, or that of two checked neighbours that agree; ValueError otherwise."""
    parts = version.split(".")
    try:
        key = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise ValueError(f"not a vLLM version: {version!r}") from None
    if key in CHECKED:
        return CHECKED[key]
    below = [k for k in CHECKED if k < key]
    above = [k for k in CHECKED if k > key]
    if below and above and CHECKED[max(below)] == CHECKED[min(above)]:
        return CHECKED[max(below)]
    checked = ", ".join(f"{a}.{b}" for a, b in CHECKED)
    raise ValueError(
        f"vLLM {version}'s block hashing was not checked (checked: {checked}, where "
        "releases between two that agree are taken to agree): pass layout= and none_hash="
    )


def _rows(values: Sequence[int]) -> bytes:
    return struct.pack(f">{len(values)}q", *values)


@dataclass(frozen=True)
class ReleaseHashing:
    """One release's block hashing: its digest, its ``NONE_HASH`` and its key layout."""

    name: str
    algorithm: str
    layout: KeyLayout
    none_hash: bytes

    @property
    def digest(self) -> HashFunction:
        return DIGESTS[self.algorithm]

    def block_keys(
        self,
        start: int,
        end: int,
        salt: str | None,
        lora: LoraKey | None,
        mm_features: Sequence[MultiModalKey] = (),
        prompt_embeds: Sequence[int] | None = None,
    ) -> tuple[object, ...] | None:
        """The extra keys of the block of tokens ``start .. end - 1``; ``None`` for none."""
        tagged = self.layout is KeyLayout.TAGGED
        keys: list[object] = []
        if lora is not None:
            keys.append(("lora", lora[0], lora[1]) if tagged else lora[0])
        for identifier, offset, length in mm_features:
            if offset < end and offset + length > start:
                if self.layout is KeyLayout.BARE:
                    keys.append(identifier)
                elif tagged:
                    keys.append(("mm", identifier, offset - start))
                else:
                    keys.append((identifier, offset - start))
        if start == 0 and salt:
            keys.append(("cache_salt", salt) if tagged else salt)
        if prompt_embeds is not None:
            rows = _rows(prompt_embeds[start:end])
            if self.layout is KeyLayout.BARE:
                keys.append(rows)
            else:
                digest = _sha256(rows).digest()
                keys.append(("prompt_embeds", digest) if tagged else digest)
        return tuple(keys) if keys else None


def vllm_hashing(
    version: str,
    algorithm: str = "sha256",
    none_hash: bytes | None = None,
    layout: KeyLayout | None = None,
) -> ReleaseHashing:
    """The block hashing of vLLM ``version`` under ``prefix_caching_hash_algo=algorithm``.

    ``none_hash`` is the release's ``NONE_HASH`` when it cannot be derived (random per
    process without ``PYTHONHASHSEED``); ``layout`` and ``none_hash`` together describe a
    release that was not checked. ValueError for an unknown algorithm or version.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"no hash algorithm {algorithm!r}: one of {', '.join(ALGORITHMS)}")
    if layout is not None and none_hash is not None:
        return ReleaseHashing(f"vllm-{version}:{algorithm}", algorithm, layout, bytes(none_hash))
    release = _release(version)
    if algorithm not in release.algorithms:
        raise ValueError(f"vLLM {version} has no hash algorithm {algorithm!r}")
    if none_hash is None:
        seed = os.environ.get("PYTHONHASHSEED")
        if seed is None and not release.random_none_hash and algorithm.startswith("sha256"):
            seed = RELEASE_NONE_HASH_SEED
        if seed is None:
            raise ValueError(
                f"vLLM {version}'s NONE_HASH under {algorithm} is random per process without "
                "PYTHONHASHSEED: pass its value (kv_cache_utils.NONE_HASH) as none_hash="
            )
        none_hash = DIGESTS[algorithm](seed)
    return ReleaseHashing(
        f"vllm-{version}:{algorithm}", algorithm, layout or release.layout, bytes(none_hash)
    )
