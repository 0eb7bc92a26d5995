"""The request a pool reads when it caches blocks: only the fields the pool reads, filled with
what the suite draws (chained hashes, made-up tokens) or a neutral default."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeRequest:
    """The fields of a request that a pool reads: its chained hashes and its tokens."""

    block_hashes: list[bytes]
    all_token_ids: list[int]
    request_id: str = "kvpool-request"
    lora_request: None = None
    session_id: None = None
    mm_features: list[Any] = field(default_factory=list)
    cache_salt: None = None


#: What a request carries when the pool reads a field: no LoRA, no multimodal input, no
#: salt, no prompt embeddings (the hashes the suite draws already include any salt).
REQUEST_DEFAULTS: dict[str, Callable[[list[bytes], list[int]], object]] = {
    "block_hashes": lambda hashes, tokens: hashes,
    "all_token_ids": lambda hashes, tokens: tokens,
    "num_tokens": lambda hashes, tokens: len(tokens),
    "request_id": lambda hashes, tokens: "kvpool-request",
    "lora_request": lambda hashes, tokens: None,
    "cache_salt": lambda hashes, tokens: None,
    "session_id": lambda hashes, tokens: None,
    "prompt_embeds": lambda hashes, tokens: None,
    "_prompt_embeds_per_block_hashes": lambda hashes, tokens: {},
    "mm_features": lambda hashes, tokens: [],
    "mm_positions": lambda hashes, tokens: [],
    "mm_hashes": lambda hashes, tokens: [],
    "mm_inputs": lambda hashes, tokens: [],
}


def request_type(fields: Iterable[str]) -> Callable[[list[bytes], list[int]], Any]:
    """A request class carrying exactly ``fields`` (each one of :data:`REQUEST_DEFAULTS`), so
    that a pool reading any other field fails loudly instead of reading a made-up value."""
    names = tuple(sorted(fields))
    unknown = [n for n in names if n not in REQUEST_DEFAULTS]
    if unknown:
        raise ValueError(f"the pool reads request fields the adapter cannot fill: {unknown}")

    class Request:
        __slots__ = names

        def __init__(self, hashes: list[bytes], tokens: list[int]) -> None:
            for name in names:
                setattr(self, name, REQUEST_DEFAULTS[name](hashes, tokens))

        def __repr__(self) -> str:
            return f"Request({len(self.block_hashes)} block hashes)"  # type: ignore[attr-defined]

    return Request
