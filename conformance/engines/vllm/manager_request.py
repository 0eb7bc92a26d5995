"""A request as vLLM's scheduler hands it to its KV cache manager, without vLLM's ``Request``.

Its LoRA adapter, multimodal features and prompt embeddings are the stand-ins of
:mod:`.request_keys`.

vLLM's ``Request`` class pulls in torch, sampling parameters and the engine; the manager
only reads a few of its fields. :class:`ManagerRequest` carries exactly those (its slots
are the fields; reading any other one fails loudly instead of inventing a value), and
computes its block hashes the way vLLM's request does: with the release's own
``get_request_block_hasher`` over its ``sha256`` and the ``NONE_HASH`` its
``init_none_hash`` set, called again every time tokens are appended.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: What the scheduler's requests say about their state; the manager compares
#: ``request.status`` with its ``RequestStatus`` (only for its watermark, which the suite
#: leaves at 0): the states are named by strings here, on both sides.
RUNNING = "RUNNING"
WAITING = "WAITING"
PREEMPTED = "PREEMPTED"


class _StatesByName(type):
    def __getattr__(cls, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        return name


class RequestStatus(metaclass=_StatesByName):
    """The stand-in for ``vllm.v1.request.RequestStatus`` (a module that needs torch):
    every state is its name, as :class:`ManagerRequest` sets ``status``."""


class ManagerRequest:
    """One request: its tokens, salt, block hashes and counters, as the manager reads them."""

    __slots__ = (
        "_hasher",
        "_prompt_embeds_per_block_hashes",
        "all_token_ids",
        "block_hashes",
        "cache_salt",
        "kv_cache_report_mode",
        "lora_request",
        "mm_features",
        "mm_hashes",
        "mm_positions",
        "num_computed_tokens",
        "num_in_flight_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "prompt_embeds",
        "request_id",
        "sampling_params",
        "session_id",
        "shared_prefix_boundary",
        "skip_reading_prefix_cache",
        "status",
    )

    def __init__(
        self,
        request_id: str,
        tokens: tuple[int, ...],
        salt: str | None,
        hasher: Callable[[Any], list[Any]],
        fields: Mapping[str, Any] | None = None,
        report_mode: str = "incremental",
    ) -> None:
        self.request_id = request_id
        #: ``"full"``: 0.33+ publishes the request's prefix-cache hits again at every lookup.
        self.kv_cache_report_mode = report_mode
        self.all_token_ids: list[int] = list(tokens)
        self.num_prompt_tokens = len(tokens)
        self.cache_salt = salt
        self.lora_request = None
        self.mm_features: list[Any] = []
        self.mm_hashes: list[Any] = []  # the multimodal fields before 0.11
        self.mm_positions: list[Any] = []
        self.sampling_params = None  # no prompt logprobs: the cache is read
        self.prompt_embeds = None
        self._prompt_embeds_per_block_hashes: dict[Any, Any] = {}
        self.session_id = None
        self.num_computed_tokens = 0
        self.num_in_flight_tokens = 0
        self.num_preemptions = 0
        self.shared_prefix_boundary = 0
        self.skip_reading_prefix_cache = False
        self.status = WAITING
        for name, value in (fields or {}).items():  # LoRA, multimodal, embeds (request_keys)
            setattr(self, name, value)
        self._hasher = hasher
        self.block_hashes: list[Any] = []
        self.block_hashes.extend(hasher(self))

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def _all_token_ids(self) -> list[int]:
        """The token list under the name 0.34's request block hasher reads (its request
        keeps the tokens in a buffer it slices, ``all_token_ids`` being a view of it)."""
        return self.all_token_ids

    @property
    def prefix_cache_hit_limit(self) -> int | None:
        """How many leading tokens may come from the prefix cache (0.34 on): none when
        the request skips reading it, else no bound (``None``)."""
        return 0 if self.skip_reading_prefix_cache else None

    def get_max_cache_hit_length(self, bound: int | None = None) -> int:
        """The longest hit the manager may take (0.34 on): never the last token (it is
        computed for its logits), within the limit above and ``bound`` when given."""
        limits = [self.num_tokens - 1, self.prefix_cache_hit_limit, bound]
        return min(limit for limit in limits if limit is not None)

    def append(self, tokens: tuple[int, ...]) -> None:
        """Output tokens arrive: the token list grows and new full blocks get hashes."""
        self.all_token_ids.extend(tokens)
        self.block_hashes.extend(self._hasher(self))

    def __repr__(self) -> str:
        return f"ManagerRequest({self.request_id!r}, {self.num_tokens} tokens)"
