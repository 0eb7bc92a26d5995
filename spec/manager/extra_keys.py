"""What a request's block hashes carry beyond its tokens: the attributes that partition the
prefix cache.

Two requests with equal tokens may still need different KV: another tenant (``cache_salt``),
another LoRA adapter, another image at the same placeholder tokens, other prompt
embeddings. A manager keeps them apart by putting these attributes into every block hash
as *extra keys*, so a block is shared only by requests that agree in the tokens **and** in
every partitioning attribute over the block's prefix.

Each attribute is read per hash block (``start .. end`` of the request's tokens) as a
*component*; two requests differ in an attribute over a prefix when the component differs
in one of its hash blocks. Which attributes a pool's hashing partitions by is profile data
(:attr:`kvpool.spec.Profile.key_attributes`, measured on each release): the spec's manager
hashes with exactly those, and the request-level properties ``keys-partitioned`` and
``keys-shared`` judge a manager by them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from ..hashing import HashInput, hash_block_tokens

#: attribute -> what it is (the ids are stable: profiles, reports and docs quote them).
ATTRIBUTES: dict[str, str] = {
    "cache-salt": "the request's cache_salt (a tenant's secret): enters the first block, "
    "and every later block through the chain",
    "lora-name": "the name of the LoRA adapter the request runs with (vLLM before 0.11 keys "
    "its lora_int_id, which the server assigns one per adapter name)",
    "lora-path": "the path the adapter was loaded from: the same name re-pointed at another "
    "adapter",
    "mm-identifier": "the identifiers (content hashes) of the multimodal features that "
    "overlap the block",
    "mm-offset": "where each of those features starts, relative to the block's first token",
    "prompt-embeds": "the prompt embeddings of the block's tokens (for a request given "
    "embeddings instead of token ids)",
}
ALL_ATTRIBUTES = frozenset(ATTRIBUTES)


@dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter: its name and the path it was loaded from."""

    name: str
    path: str


@dataclass(frozen=True)
class MultiModalFeature:
    """One multimodal input: its identifier (a hash of its content) and the placeholder
    tokens it occupies, ``offset .. offset + length - 1`` of the prompt."""

    identifier: str
    offset: int
    length: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.length < 1:
            raise ValueError("a multimodal feature needs offset >= 0 and length >= 1")

    def overlaps(self, start: int, end: int) -> bool:
        return self.offset < end and self.offset + self.length > start


@dataclass(frozen=True)
class ExtraKeys:
    """A request's partitioning attributes besides its ``cache_salt``: a LoRA adapter,
    multimodal features (sorted by offset, disjoint) and prompt embeddings (one stand-in
    value per prompt token: equal values, equal embedding rows)."""

    lora: LoraAdapter | None = None
    mm: tuple[MultiModalFeature, ...] = ()
    embeds: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if any(g.offset < f.offset + f.length for f, g in itertools.pairwise(self.mm)):
            raise ValueError("multimodal features must be sorted by offset and disjoint")

    @property
    def attributes(self) -> frozenset[str]:
        """The attributes this request sets (``cache-salt`` aside)."""
        named = set()
        if self.lora is not None:
            named |= {"lora-name", "lora-path"}
        if self.mm:
            named |= {"mm-identifier", "mm-offset"}
        if self.embeds is not None:
            named.add("prompt-embeds")
        return frozenset(named)


NO_EXTRA = ExtraKeys()


def components(salt: str | None, extra: ExtraKeys, start: int, end: int) -> dict[str, HashInput]:
    """Each attribute's value over the hash block ``start .. end - 1`` (``None`` or ``()``
    where the request has none)."""
    features = [f for f in extra.mm if f.overlaps(start, end)]
    lora = extra.lora
    return {
        "cache-salt": salt,
        "lora-name": None if lora is None else lora.name,
        "lora-path": None if lora is None else lora.path,
        "mm-identifier": tuple(f.identifier for f in features),
        "mm-offset": tuple(f.offset - start for f in features),
        "prompt-embeds": None if extra.embeds is None else extra.embeds[start:end],
    }


def block_extra_keys(
    salt: str | None, extra: ExtraKeys, start: int, end: int, partitions: frozenset[str]
) -> tuple[HashInput, ...] | None:
    """The extra keys of the hash block ``start .. end - 1``: the salt alone (as it always
    was), then ``(attribute, value)`` for every other attribute in ``partitions`` the
    block has; ``None`` when there are none."""
    found = components(salt, extra, start, end)
    keys: list[HashInput] = []
    if salt is not None and "cache-salt" in partitions:
        keys.append(salt)
    for name in ATTRIBUTES:
        value = found[name]
        if name != "cache-salt" and name in partitions and value not in (None, ()):
            keys.append((name, value))
    return tuple(keys) or None


def partitioned_block_hashes(
    tokens: Sequence[int],
    hash_block_size: int,
    salt: str | None,
    extra: ExtraKeys,
    partitions: frozenset[str],
) -> tuple[bytes, ...]:
    """The chained hashes of every full hash block of ``tokens``, each with its block's
    extra keys under ``partitions``."""
    hashes: list[bytes] = []
    parent: bytes | None = None
    for start in range(0, len(tokens) - hash_block_size + 1, hash_block_size):
        end = start + hash_block_size
        keys = block_extra_keys(salt, extra, start, end, partitions)
        parent = hash_block_tokens(parent, tokens[start:end], keys)
        hashes.append(parent)
    return tuple(hashes)


@dataclass(frozen=True)
class Signature:
    """Everything a request's KV over a prefix depends on: tokens, salt, extra keys."""

    tokens: tuple[int, ...]
    salt: str | None
    extra: ExtraKeys = NO_EXTRA


def differing(a: Signature, b: Signature, end: int, hash_block_size: int) -> frozenset[str]:
    """The attributes ``a`` and ``b`` differ in over the hash blocks inside ``0 .. end - 1``
    (``tokens`` when their tokens differ there)."""
    found: set[str] = set()
    if a.tokens[:end] != b.tokens[:end]:
        found.add("tokens")
    for start in range(0, end - hash_block_size + 1, hash_block_size):
        stop = start + hash_block_size
        mine = components(a.salt, a.extra, start, stop)
        theirs = components(b.salt, b.extra, start, stop)
        found |= {name for name in ATTRIBUTES if mine[name] != theirs[name]}
    return frozenset(found)
