"""How a KV cache manager is set up over its pool: the block size and the KV-cache groups."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group. Every group keeps its own block table per request.

    ``sliding_window_blocks`` is 0 for full attention. A sliding-window group only reads the
    last ``sliding_window_blocks`` blocks before the block being written: older entries of
    its table are replaced by the null block and their blocks freed.
    """

    sliding_window_blocks: int = 0

    def __post_init__(self) -> None:
        if self.sliding_window_blocks < 0:
            raise ValueError("sliding_window_blocks cannot be negative")

    @property
    def is_sliding(self) -> bool:
        return self.sliding_window_blocks > 0


FULL_ATTENTION = KVGroup()


@dataclass(frozen=True)
class ManagerConfig:
    """The manager's block size (a multiple of the pool's ``hash_block_size``) and groups.

    Group ``g`` of the tuple registers its keys with group id ``g``.
    """

    block_size: int
    groups: tuple[KVGroup, ...] = (FULL_ATTENTION,)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size must be positive")
        if not self.groups:
            raise ValueError("a manager needs at least one KV-cache group")

    @property
    def has_sliding_window(self) -> bool:
        return any(g.is_sliding for g in self.groups)

    def blocks_for(self, num_tokens: int) -> int:
        """Table entries needed to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)
