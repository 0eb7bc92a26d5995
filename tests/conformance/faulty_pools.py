"""Planted faults: our pool with one real bug each, to show the suite can fail.

Each class changes a few lines of ``kvpool.impl.BlockPool`` the way a real pool got it
wrong (SEMANTICS.md, "Real bugs of this family"). Passed to ``kvpool conform`` as
``faulty_pools:NAME``, each must be caught with exit status 1 (``test_conform_cli`` holds
the table of which level catches which).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kvpool.impl import AllBlocksCleared, BlockPool, KVCacheBlock


class CachedToFront(BlockPool):
    """Cached blocks reaching ref_cnt 0 go to the front: LRU eviction lost."""

    def free_blocks(
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> None:
        super().free_blocks(ordered_blocks, evict_first=True)


class TouchForgetsQueue(BlockPool):
    """``touch`` takes a reference on a free cached block but leaves it in the free queue."""

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1


class StaleKeyAfterReuse(BlockPool):
    """A cached block handed out again keeps its key: a stale prefix hit on new data."""

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        if not 0 <= num_blocks <= self.get_num_free_blocks():
            raise ValueError(f"cannot get {num_blocks} blocks")
        blocks = self.free_block_queue.popleft_n(num_blocks)
        for block in blocks:
            watcher = self._reuse_watchers.pop(block.block_id, None)
            if watcher is not None:
                watcher(block)
            block.ref_cnt = 1
        return blocks


class WatcherNeverFires(BlockPool):
    """``unpin_blocks`` forgets the watcher: a reader keeps reading a reused block."""

    def unpin_blocks(
        self, blocks: Iterable[KVCacheBlock], on_reuse: Callable[[KVCacheBlock], None]
    ) -> None:
        super().unpin_blocks(blocks, lambda block: None)


class DoubleFreeAccepted(BlockPool):
    """Freeing a block more often than it is held is not refused: ref_cnt goes negative."""

    def free_blocks(
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> None:
        for block in ordered_blocks:
            if block.is_null:
                continue
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is None or not self.enable_caching or evict_first:
                    self.free_block_queue.prepend_n([block])
                else:
                    self.free_block_queue.append_n([block])


class NewestDuplicateHit(BlockPool):
    """A lookup returns the newest of several blocks cached under one key."""

    def get_cached_block(self, block_hash: bytes, kv_cache_group_ids: Iterable[int]) -> Any:
        hits = []
        for group in kv_cache_group_ids:
            under_key = self.cached_block_hash_to_block.get_all_blocks(
                block_hash + group.to_bytes(4, "big")
            )
            if not under_key:
                return None
            hits.append(under_key[-1])
        return hits


class UsageCountsNull(BlockPool):
    """``get_usage`` divides by every block, the null block included."""

    def get_usage(self) -> float:
        return 1.0 - self.get_num_free_blocks() / self.num_gpu_blocks


class ResetWhileHeld(BlockPool):
    """``reset_prefix_cache`` clears the cache even while requests hold blocks."""

    def reset_prefix_cache(self) -> bool:
        self.cached_block_hash_to_block.clear()
        self.cached_block_hashes_by_block.clear()
        for block in self.blocks:
            block.reset_hash()
        watchers, self._reuse_watchers = self._reuse_watchers, {}
        for block_id, watcher in sorted(watchers.items()):
            watcher(self.blocks[block_id])
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True


#: Each planted fault, and the level of ``kvpool conform`` that must catch it.
CAUGHT_AT = {
    "CachedToFront": "order",
    "TouchForgetsQueue": "safety",
    "StaleKeyAfterReuse": "safety",
    "WatcherNeverFires": "safety",
    "DoubleFreeAccepted": "robustness",
    "NewestDuplicateHit": "safety",
    "UsageCountsNull": "safety",
    "ResetWhileHeld": "safety",
}
