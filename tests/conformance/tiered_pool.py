"""Our pool with a slower tier behind it, as such a design has it: a cached block whose
last holder frees it keeps its contents in the other tier, so its keys die here (each
removal published) and it is freed as a block without a key."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from kvpool.impl import BlockPool, KVCacheBlock


class TieredPool(BlockPool):
    def free_blocks(
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> None:
        blocks = list(ordered_blocks)
        released = Counter(id(b) for b in blocks)
        dying = {
            b.block_id
            for b in blocks
            if not b.is_null and self.owns(b) and b.ref_cnt == released[id(b)]
        }
        self.evict_blocks(sorted(dying))  # the contents live on in the other tier
        super().free_blocks(blocks, evict_first)

    def owns(self, block: KVCacheBlock) -> bool:
        """Whether ``block`` is this pool's (a peer pool's block is handed back, not
        evicted here)."""
        return block.block_id < len(self.blocks) and self.blocks[block.block_id] is block
