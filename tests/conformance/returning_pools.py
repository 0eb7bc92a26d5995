"""Our pool, refusing by return value as such a design has it: a call outside the contract
returns ``False`` (``None`` from ``get_new_blocks``) and changes nothing, a call it takes
returns ``True`` (the blocks from ``get_new_blocks``).

``ReturningPool`` is the sound one; two planted faults beside it:

- ``ChangedThenFalse``, on a ``free_blocks`` it refuses, still releases every held block
  listed once, then returns ``False``: a refusal that changed the pool;
- ``TrueOnRefusal`` swallows a refused ``free_blocks`` and returns ``True``, as if taken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kvpool.impl import BlockPool, BlockPoolError, KVCacheBlock


def _status(call: Callable[[], object]) -> bool:
    try:
        call()
    except BlockPoolError:
        return False
    return True


class ReturningPool(BlockPool):
    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock] | None:  # type: ignore[override]
        try:
            return super().get_new_blocks(num_blocks)
        except BlockPoolError:
            return None

    def free_blocks(  # type: ignore[override]
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> bool:
        blocks = list(ordered_blocks)
        return _status(lambda: BlockPool.free_blocks(self, blocks, evict_first))

    def touch(self, blocks: Iterable[KVCacheBlock]) -> bool:  # type: ignore[override]
        listed = list(blocks)
        return _status(lambda: BlockPool.touch(self, listed))

    def unpin_blocks(self, blocks: Iterable[KVCacheBlock], on_reuse: Any) -> bool:  # type: ignore[override]
        listed = list(blocks)
        return _status(lambda: BlockPool.unpin_blocks(self, listed, on_reuse))

    def cache_full_blocks(self, *args: Any, **kwargs: Any) -> bool:  # type: ignore[override]
        return _status(lambda: BlockPool.cache_full_blocks(self, *args, **kwargs))

    def evict_blocks(self, block_ids: Iterable[int]) -> bool:  # type: ignore[override]
        ids = list(block_ids)
        return _status(lambda: BlockPool.evict_blocks(self, ids))

    def move_block_hashes(self, src_block: KVCacheBlock, dst_block: KVCacheBlock) -> bool:  # type: ignore[override]
        return _status(lambda: BlockPool.move_block_hashes(self, src_block, dst_block))


class ChangedThenFalse(ReturningPool):
    def free_blocks(  # type: ignore[override]
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> bool:
        blocks = list(ordered_blocks)
        if _status(lambda: BlockPool.free_blocks(self, blocks, evict_first)):
            return True
        # the fault: every held block listed is released once all the same
        held = {id(b): b for b in blocks if not b.is_null and self._mine(b) and b.ref_cnt >= 1}
        _status(lambda: BlockPool.free_blocks(self, list(held.values()), evict_first))
        return False

    def _mine(self, block: KVCacheBlock) -> bool:
        return block.block_id < len(self.blocks) and self.blocks[block.block_id] is block


class TrueOnRefusal(ReturningPool):
    def free_blocks(  # type: ignore[override]
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> bool:
        super().free_blocks(ordered_blocks, evict_first)
        return True  # the fault: a refused call reads as taken
