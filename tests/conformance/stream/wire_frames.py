"""Encoding vLLM's wire format by hand, for the tests: what a publisher would send."""

from __future__ import annotations

from typing import Any

import msgspec


def stored(
    hashes: list[bytes | int], parent: bytes | int | None = None, group: int = 0
) -> dict[str, Any]:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": [1] * (2 * len(hashes)),
        "block_size": 2,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "group_idx": group,
    }


def removed(hashes: list[bytes | int], group: int = 0) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU", "group_idx": group}


CLEARED: dict[str, Any] = {"type": "AllBlocksCleared"}


def payload(events: list[Any], rank: int | None = 0, ts: float = 1.0) -> bytes:
    batch: list[Any] = [ts, events] if rank is None else [ts, events, rank]
    return msgspec.msgpack.encode(batch)


def message(
    seq: int,
    events: list[Any],
    rank: int | None = 0,
    publisher: bytes | None = None,
    ts: float = 1.0,
) -> list[bytes]:
    sequence = seq.to_bytes(8, "big") + (publisher or b"")
    return [b"", sequence, payload(events, rank, ts)]
