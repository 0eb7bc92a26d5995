"""How a KV cache manager is set up over its pool: the block size and the KV-cache groups."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group. Every group keeps its own block table per request.

    A sliding-window group's window is ``sliding_window_blocks * block_size +
    sliding_window_rest`` tokens (an engine's ``sliding_window``, any token count from 2
    up; a window of at most one block has no whole block and all its tokens as the rest);
    the defaults, no whole block and a rest of 1, are full attention. The token being written reads
    itself and the ``window - 1`` tokens before it. Entries of its table holding only
    tokens no later token reads are replaced by the null block and their blocks freed
    (:meth:`ManagerConfig.skipped_blocks`); a hit needs the last
    :meth:`ManagerConfig.window_hit_blocks` blocks of the prefix.
    """

    sliding_window_blocks: int = 0
    #: Tokens of the window past its whole blocks (1: the window a spec of
    #: ``sliding_window_blocks`` blocks always meant; a trace leaves that default out).
    sliding_window_rest: int = field(default=1, metadata={"itf": "omit-default"})

    def __post_init__(self) -> None:
        if self.sliding_window_blocks < 0:
            raise ValueError("sliding_window_blocks cannot be negative")
        if self.sliding_window_rest < 0:
            raise ValueError("sliding_window_rest cannot be negative")

    @property
    def is_sliding(self) -> bool:
        return self.sliding_window_blocks > 0 or self.sliding_window_rest > 1


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
        if any(g.is_sliding and self.window_tokens(i) < 2 for i, g in enumerate(self.groups)):
            raise ValueError("a sliding window reads at least one token before the written one")

    @property
    def has_sliding_window(self) -> bool:
        return any(g.is_sliding for g in self.groups)

    def blocks_for(self, num_tokens: int) -> int:
        """Table entries needed to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def window_tokens(self, group: int) -> int:
        """Group ``group``'s window in tokens (0 for full attention)."""
        g = self.groups[group]
        if not g.is_sliding:
            return 0
        return g.sliding_window_blocks * self.block_size + g.sliding_window_rest

    def window_hit_blocks(self, group: int) -> int:
        """The blocks at the end of a cached prefix that group ``group`` reads to compute
        the token after it (0 for full attention: every block): the ``window - 1`` tokens
        before that token, rounded up to whole blocks."""
        window = self.window_tokens(group)
        return -(-(window - 1) // self.block_size) if window else 0

    def skipped_blocks(self, group: int, num_computed_tokens: int) -> int:
        """The leading blocks of group ``group``'s table that no token after the first
        ``num_computed_tokens`` reads: the next token reads back to token
        ``num_computed_tokens - window + 1``, so the whole blocks before it are skipped
        (0 for full attention)."""
        window = self.window_tokens(group)
        if not window:
            return 0
        return max(0, num_computed_tokens - window + 1) // self.block_size

    def parent_known_groups(self) -> frozenset[int]:
        """The groups whose ``BlockStored`` always names a parent the stream still holds
        (``events-parent-known``): full attention, and windows longer than one block. A
        window of at most one block frees a block's parent before the block is full, and
        an allocation may evict that parent before the block is stored (vLLM's
        ``allocate_slots`` frees skipped blocks, allocates, then caches)."""
        return frozenset(
            i
            for i, g in enumerate(self.groups)
            if not g.is_sliding or self.window_tokens(i) > self.block_size
        )
