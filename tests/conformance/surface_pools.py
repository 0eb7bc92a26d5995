"""Pools whose surface the suite cannot drive, one pool whose own code crashes, and one that
breaks a rule as it is built: each a small variant of :class:`tiny_pool.TinyPool`."""

from __future__ import annotations

from typing import Any

from kvpool.impl import BlockPool
from tiny_pool import Block, TinyPool  # on sys.path via pytest


class NoFreeCount:
    """The README's pool without ``get_num_free_blocks``."""

    def __init__(self, num_gpu_blocks: int, **_: Any) -> None:
        self.pool = TinyPool(num_gpu_blocks)
        self.blocks = self.pool.blocks

    def get_new_blocks(self, n: int) -> list[Block]:
        return self.pool.get_new_blocks(n)

    def free_blocks(self, blocks: list[Block]) -> None:
        self.pool.free_blocks(blocks)

    def touch(self, blocks: list[Block]) -> None:
        self.pool.touch(blocks)

    def get_cached_block(self, block_hash: bytes, groups: list[int]) -> None:
        return None


class OneArgumentLookup(TinyPool):
    """``get_cached_block`` without the groups argument."""

    def get_cached_block(self, block_hash: bytes) -> None:  # type: ignore[override]
        return None


class NoBlocksAndNoFreeCount:
    """Two things missing at once: the blocks list and the free count."""

    def __init__(self, num_gpu_blocks: int, **_: Any) -> None:
        self.pool = TinyPool(num_gpu_blocks)

    def get_new_blocks(self, n: int) -> list[Block]:
        return self.pool.get_new_blocks(n)

    def free_blocks(self, blocks: list[Block]) -> None:
        self.pool.free_blocks(blocks)


class IdsForBlocks(TinyPool):
    """``get_new_blocks`` hands out ids, not blocks: a shape no signature shows."""

    def get_new_blocks(self, n: int) -> list[int]:  # type: ignore[override]
        return [b.block_id for b in super().get_new_blocks(n)]


class TouchCrashes(TinyPool):
    """The pool's own ``touch`` raises: a crash of the pool, so a finding."""

    def touch(self, blocks: list[Block]) -> None:
        raise RuntimeError("touch is broken in this pool")


class FreeCountOffByOne(TinyPool):
    """Counts one block too many from the start: a rule broken by building the pool."""

    def get_num_free_blocks(self) -> int:
        return super().get_num_free_blocks() + 1


class TwoFaults(BlockPool):
    """Two bugs, the second behind the first: a batch of freed blocks is queued in reverse
    order (an order-level finding at every multi-block free), and a block of such a batch
    handed out again gets a reference count of 2 instead of 1 (met only after the first)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batched: set[int] = set()
        self.freeing = False

    def free_blocks(self, ordered_blocks: Any, *args: Any, **kwargs: Any) -> None:
        if self.freeing:  # the pool's own call for its blocks of a batch with a peer's
            super().free_blocks(ordered_blocks, *args, **kwargs)
            return
        blocks = list(ordered_blocks)
        released = [b for b in blocks if b.ref_cnt == 1 and blocks.count(b) == 1]
        mine = self.blocks
        own = all(b.block_id < len(mine) and mine[b.block_id] is b for b in blocks)
        if own and len(released) > 1 and all(b.block_hash is None for b in blocks):
            # two or more unkeyed blocks of this pool alone (no peer pool's) reach the
            # front together: the reversal shows in its queue
            self.batched |= {b.block_id for b in released}
        self.freeing = True
        try:
            super().free_blocks(list(reversed(blocks)), *args, **kwargs)
        finally:
            self.freeing = False

    def get_new_blocks(self, num_blocks: int) -> Any:
        taken = super().get_new_blocks(num_blocks)
        for block in taken:
            if block.block_id in self.batched:
                self.batched.discard(block.block_id)
                block.ref_cnt = 2
        return taken


class ReversedBatch(TwoFaults):
    """The first of :class:`TwoFaults`'s bugs alone."""

    get_new_blocks = BlockPool.get_new_blocks


class _HalfTarget:
    """A Target with no ``view`` and no ``structure_problems``."""

    name = "half"
    operations = frozenset({"get_new_blocks"})
    observes: frozenset[str] = frozenset()

    def apply(self, action: object) -> object:
        raise NotImplementedError


def half_target(config: object, profile: object) -> _HalfTarget:
    """A factory taking ``(config, profile)``: the suite uses what it builds as a Target."""
    return _HalfTarget()
