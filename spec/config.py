"""How a pool is built: what ``BlockPool.__init__`` is given."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PoolConfig:
    """The constructor arguments of a pool, plus the size of its peer pool.

    ``peer_blocks`` > 0 builds a second pool beside it whose blocks the first one may be
    asked to free (they are handed back to their owner); 0 means no peer.
    """

    num_gpu_blocks: int
    enable_caching: bool = True
    hash_block_size: int = 1
    enable_kv_cache_events: bool = True
    peer_blocks: int = 0

    def __post_init__(self) -> None:
        if self.num_gpu_blocks < 1:
            raise ValueError("a pool needs at least one block (the null block)")
        if self.hash_block_size < 1:
            raise ValueError("hash_block_size must be positive")
        if self.peer_blocks < 0:
            raise ValueError("peer_blocks cannot be negative")
