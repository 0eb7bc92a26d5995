"""A request's partitioning attributes as a vLLM release's hashing reads them, without
vLLM's ``LoRARequest``, multimodal classes or torch.

The release's ``generate_block_hash_extra_keys`` (and its block pool, for KV events) reads
a few fields of these objects; the stand-ins here carry exactly those. Two helpers the
hashing calls live in modules that are never loaded, so the isolation loader gives them
these stand-ins: ``tensor_data`` (the bytes of a tensor: here of :class:`Embeddings`) and
``get_mm_features_in_window`` (the index range of the features overlapping a token range).

A release before 0.11 keys a LoRA adapter by its ``lora_int_id``, which vLLM's server
assigns one per adapter name: :class:`LoraIds` does the same.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvpool.spec.manager import ExtraKeys, LoraAdapter


@dataclass(frozen=True)
class LoraRequest:
    """The fields of vLLM's ``LoRARequest`` its hashing and KV events read."""

    lora_name: str
    lora_int_id: int
    lora_path: str

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def path(self) -> str:
        return self.lora_path

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def id(self) -> int:
        return self.lora_int_id


class LoraIds:
    """One ``lora_int_id`` per adapter name, from 1 in order of first use."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def request(self, lora: LoraAdapter | None) -> LoraRequest | None:
        if lora is None:
            return None
        number = self.ids.setdefault(lora.name, len(self.ids) + 1)
        return LoraRequest(lora.name, number, lora.path)


@dataclass(frozen=True)
class PlaceholderRange:
    """Where a multimodal input's placeholder tokens are: ``offset`` and ``length``."""

    offset: int
    length: int


@dataclass(frozen=True)
class MultiModalFeatureSpec:
    """The fields of vLLM's ``MultiModalFeatureSpec`` the hashing reads (0.11 on)."""

    identifier: str
    mm_position: PlaceholderRange
    mm_hash: str


class Embeddings:
    """Prompt embeddings: one stand-in value per token, sliced as a tensor's rows are."""

    __slots__ = ("values",)

    def __init__(self, values: Sequence[int]) -> None:
        self.values = tuple(values)

    def __getitem__(self, rows: slice) -> Embeddings:
        return Embeddings(self.values[rows])

    def __len__(self) -> int:
        return len(self.values)


class RowBytes(bytes):
    """The rows' bytes, read as a buffer (0.24 on) or through ``tobytes()``, as the numpy
    array older releases got (0.12-0.23)."""

    def tobytes(self) -> bytes:
        return bytes(self)


def tensor_data(tensor: object) -> RowBytes:
    """What vLLM's ``tensor_data`` gives for :class:`Embeddings`: the rows' bytes."""
    if not isinstance(tensor, Embeddings):
        raise TypeError(f"kvpool's tensor_data stand-in takes Embeddings, not {tensor!r}")
    return RowBytes(b"".join(struct.pack(">q", v) for v in tensor.values))


def mm_features_in_window(features: Sequence[Any], start: int, end: int) -> tuple[int, int]:
    """The index range ``[lo, hi)`` of ``features`` (sorted by offset, disjoint) whose
    placeholder tokens overlap tokens ``start .. end - 1``."""
    lo = 0
    while lo < len(features) and _end(features[lo]) <= start:
        lo += 1
    hi = lo
    while hi < len(features) and features[hi].mm_position.offset < end:
        hi += 1
    return lo, hi


def _end(feature: Any) -> int:
    position = feature.mm_position
    return int(position.offset + position.length)


def request_fields(extra: ExtraKeys, lora_ids: LoraIds) -> dict[str, Any]:
    """The request fields that carry ``extra``: ``lora_request``, ``mm_features`` (and,
    for releases before 0.11, ``mm_hashes`` and ``mm_positions``) and ``prompt_embeds``."""
    features = [
        MultiModalFeatureSpec(f.identifier, PlaceholderRange(f.offset, f.length), f.identifier)
        for f in extra.mm
    ]
    return {
        "lora_request": lora_ids.request(extra.lora),
        "mm_features": features,
        "mm_hashes": [f.identifier for f in extra.mm],
        "mm_positions": [f.mm_position for f in features],
        "prompt_embeds": None if extra.embeds is None else Embeddings(extra.embeds),
    }
