"""KV-cache events, with vLLM's field names. Hashes carry no group suffix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks were registered in the prefix cache (one event per caching call)."""

    block_hashes: list[bytes]
    parent_block_hash: bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None
    extra_keys: list[tuple[object, ...] | None] | None = None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Keys left the prefix cache (one event per removed key)."""

    block_hashes: list[bytes]
    medium: str | None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was dropped."""


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared
