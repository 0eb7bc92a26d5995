"""What the pool reads off a request, and a small concrete request for callers and tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .hashing import HashFunction, request_block_hashes, sha256_hash


class LoRARequestLike(Protocol):
    """The LoRA fields an event carries."""

    @property
    def adapter_id(self) -> int: ...

    @property
    def name(self) -> str: ...


class RequestLike(Protocol):
    """The request fields the pool reads.

    ``block_hashes[i]`` is the chained hash of the first ``(i + 1) *
    hash_block_size`` tokens; ``all_token_ids`` are the tokens so far.
    """

    @property
    def block_hashes(self) -> Sequence[bytes]: ...

    @property
    def all_token_ids(self) -> Sequence[int]: ...

    @property
    def lora_request(self) -> LoRARequestLike | None: ...


@dataclass(frozen=True)
class LoRARequest:
    """A minimal LoRA adapter reference."""

    adapter_id: int
    name: str


@dataclass
class Request:
    """A request: its tokens and their chained hashes at the pool's ``hash_block_size``."""

    request_id: str
    all_token_ids: list[int]
    block_hashes: list[bytes] = field(default_factory=list)
    lora_request: LoRARequestLike | None = None

    @classmethod
    def from_tokens(
        cls,
        request_id: str,
        token_ids: Sequence[int],
        hash_block_size: int,
        extra_keys: tuple[object, ...] | None = None,
        lora_request: LoRARequestLike | None = None,
        hash_function: HashFunction = sha256_hash,
    ) -> Request:
        """Build a request whose ``block_hashes`` cover every full hash block of ``token_ids``."""
        tokens = list(token_ids)
        hashes = request_block_hashes(tokens, hash_block_size, extra_keys, hash_function)
        return cls(request_id, tokens, hashes, lora_request)
