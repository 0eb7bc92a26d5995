"""The manager's own memory: its requests, their block tables, and the KV data in blocks.

The pool is not in here: the manager is a client of the pool and learns about it only
through the pool's operations. ``contents`` stands for the engine's KV data: which request's
tokens (under which salt) each block holds, so that a read of the wrong data shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..config import PoolConfig
from .config import ManagerConfig
from .extra_keys import ALL_ATTRIBUTES, NO_EXTRA, ExtraKeys, partitioned_block_hashes
from .report import INCREMENTAL, ResentStore

#: One block table per KV-cache group, block ids in token order (0 = the null block).
Tables = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class BlockData:
    """What a block holds: the KV of ``tokens`` (from the block's first slot), under ``salt``.

    A slot whose data is unknown (never written) holds ``-1``.
    """

    salt: str | None
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class RequestState:
    """One request as its manager sees it."""

    request_id: str
    tokens: tuple[int, ...]
    salt: str | None
    #: False once preempted: the request then holds no blocks.
    running: bool
    tables: Tables
    #: Tokens whose KV is in the tables' blocks (from a cache hit or computed).
    num_computed_tokens: int
    #: Per group, how many leading full blocks are registered in the prefix cache.
    num_cached_blocks: tuple[int, ...]
    #: Its partitioning attributes besides the salt (LoRA, multimodal features, embeds).
    extra: ExtraKeys = NO_EXTRA
    #: Whether its hits are published again at every lookup (:mod:`.report`).
    report_mode: str = INCREMENTAL


@dataclass(frozen=True)
class Scheduled:
    """What the manager answers when it (re)schedules or computes a request.

    ``copies`` are the ``(src, dst)`` block copies the engine had to make before writing.
    """

    num_computed_tokens: int
    tables: Tables
    copies: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ManagerState:
    """The manager's configuration, its live requests and the blocks' KV data."""

    config: ManagerConfig
    pool_config: PoolConfig
    requests: Mapping[str, RequestState] = field(default_factory=dict)
    contents: Mapping[int, BlockData] = field(default_factory=dict)
    #: The attributes its block hashes carry (the profile's ``key_attributes``).
    partitions: frozenset[str] = ALL_ATTRIBUTES
    #: A sliding-window group frees its blocks without a key with ``evict_first``, after
    #: the keyed ones (the profile's ``window_unkeyed_free_first``).
    window_unkeyed_free_first: bool = False
    #: The hits re-sent by the latest action's lookups (requests in the ``"full"``
    #: report mode), in order: events the manager adds to its pool's (:mod:`.report`).
    resent: tuple[ResentStore, ...] = ()

    def held_blocks(self) -> frozenset[int]:
        """Every real block some request's table holds."""
        return frozenset(b for r in self.requests.values() for t in r.tables for b in t if b)


def block_hashes(
    request: RequestState, hash_block_size: int, partitions: frozenset[str] = ALL_ATTRIBUTES
) -> tuple[bytes, ...]:
    """The request's chained hashes at the pool's ``hash_block_size`` granularity, each
    block's extra keys under ``partitions``."""
    return partitioned_block_hashes(
        request.tokens, hash_block_size, request.salt, request.extra, partitions
    )


def initial_manager_state(
    config: ManagerConfig,
    pool_config: PoolConfig,
    partitions: frozenset[str] = ALL_ATTRIBUTES,
    *,
    window_unkeyed_free_first: bool = False,
) -> ManagerState:
    """A manager with no requests over a new pool built from ``pool_config``, hashing
    with the extra keys of ``partitions`` (and freeing a sliding window's blocks without a
    key first where ``window_unkeyed_free_first``)."""
    if config.block_size % pool_config.hash_block_size:
        raise ValueError(
            f"block_size {config.block_size} is not a multiple of the pool's "
            f"hash_block_size {pool_config.hash_block_size}"
        )
    return ManagerState(
        config,
        pool_config,
        partitions=partitions,
        window_unkeyed_free_first=window_unkeyed_free_first,
    )
