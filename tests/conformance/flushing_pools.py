"""Our pool, flushing under pressure as such a design has it: an allocation that would
evict a cached block first drops the keys of every free block (each removal published),
then hands blocks out as before.

``FlushingPool`` is the sound one; ``FlushKeepsStale`` plants a fault: its flush clears the
key of the first block it is about to hand out on the block only, so that key stays in the
prefix-cache index, naming a block that now holds another request's data.
"""

from __future__ import annotations

from kvpool.impl import BlockPool, KVCacheBlock


class FlushingPool(BlockPool):
    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        free = self.free_block_queue.get_all_free_blocks()
        pressure = any(b.block_hash is not None for b in free[:num_blocks])
        if self.enable_caching and 0 <= num_blocks <= len(free) and pressure:
            self.flush(free)
        return super().get_new_blocks(num_blocks)

    def flush(self, free: list[KVCacheBlock]) -> None:
        self.evict_blocks([b.block_id for b in free])


class FlushKeepsStale(FlushingPool):
    def flush(self, free: list[KVCacheBlock]) -> None:
        first, *rest = free
        self.evict_blocks([b.block_id for b in rest])
        first.reset_hash()  # the fault: the index keeps this block under its old key
