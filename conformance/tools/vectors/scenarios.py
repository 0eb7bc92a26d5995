"""Hand-written vectors at the edge of each invariant: the moment it could break."""

from __future__ import annotations

from dataclasses import dataclass

from kvpool.spec import (
    NULL_BLOCK,
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    IsBlockWritable,
    MoveBlockHashes,
    PeerGetNewBlocks,
    PoolConfig,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.hashing import request_block_hashes

A = request_block_hashes((1, 2, 3, 4), 1)
B = request_block_hashes((1, 2, 9, 9), 1)


@dataclass(frozen=True)
class Scenario:
    name: str
    level: str
    config: PoolConfig
    actions: tuple[Action, ...]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "free-iff-unreferenced",
        "order",
        PoolConfig(4),
        (
            GetNewBlocks(2),
            Touch((1,)),
            FreeBlocks((1,)),
            GetNumFreeBlocks(),
            FreeBlocks((1, 2)),
            GetNumFreeBlocks(),
        ),
    ),
    Scenario(
        "queue-holds-each-once",
        "robustness",
        PoolConfig(4),
        (GetNewBlocks(1), FreeBlocks((1, 1)), FreeBlocks((1,)), FreeBlocks((1,))),
    ),
    Scenario(
        "map-matches-block-keys",
        "order",
        PoolConfig(5),
        (
            GetNewBlocks(2),
            CacheFullBlocks(A, (1, 2), 0, 2, 2),
            GetCachedBlock(A[1], (0,)),
            EvictBlocks((1,)),
            GetCachedBlock(A[1], (0,)),
            FreeBlocks((2, 1)),
            GetNewBlocks(3),
        ),
    ),
    Scenario(
        "extra-keys-need-primary",
        "order",
        PoolConfig(5, hash_block_size=1),
        (
            GetNewBlocks(2),
            CachePartialBlock(A, 1, 1, 0, 2),
            CachePartialBlock(B, 1, 1, 1, 2),
            MoveBlockHashes(1, 2),
            GetCachedBlock(A[0], (0,)),
            GetCachedBlock(B[0], (1,)),
            FreeBlocks((1, 2)),
        ),
    ),
    Scenario(
        "null-block-inert",
        "order",
        PoolConfig(3),
        (
            FreeBlocks((NULL_BLOCK,)),
            Touch((NULL_BLOCK,)),
            IsBlockWritable(NULL_BLOCK),
            CachePartialBlock(A, NULL_BLOCK, 1, 0, 1),
            GetNewBlocks(2),
            GetNumFreeBlocks(),
        ),
    ),
    Scenario(
        "no-keys-without-caching",
        "robustness",
        PoolConfig(4, enable_caching=False),
        (GetNewBlocks(2), CacheFullBlocks(A, (1, 2), 0, 2, 2), FreeBlocks((2, 1)), GetNewBlocks(1)),
    ),
    Scenario(
        "no-events-when-disabled",
        "order",
        PoolConfig(4, enable_kv_cache_events=False),
        (GetNewBlocks(2), CacheFullBlocks(A, (1, 2), 0, 2, 2), TakeEvents(), ResetPrefixCache()),
    ),
    Scenario(
        "watchers-on-real-blocks",
        "robustness",
        PoolConfig(4),
        (
            GetNewBlocks(2),
            UnpinBlocks((NULL_BLOCK,), "w1"),
            UnpinBlocks((1,), "w1"),
            GetNewBlocks(2),
        ),
    ),
    Scenario(
        "peer-consistent",
        "order",
        PoolConfig(4, peer_blocks=3),
        (PeerGetNewBlocks(2), GetNewBlocks(1), FreeBlocks((1,), False, (2, 1)), GetNewBlocks(3)),
    ),
)
