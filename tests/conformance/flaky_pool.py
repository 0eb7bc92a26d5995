"""A pool that gives two answers to one question: half the time a freed unkeyed block goes
to the back. Replays of its traces must be reported as nondeterministic."""

from __future__ import annotations

import random
from collections.abc import Iterable

from kvpool.impl import BlockPool, KVCacheBlock


class CoinFlipFree(BlockPool):
    def free_blocks(
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> None:
        blocks = list(ordered_blocks)
        super().free_blocks(blocks, evict_first=evict_first)
        if random.random() < 0.5:
            for block in blocks:
                if block.ref_cnt == 0 and block.block_hash is None and not block.is_null:
                    self.free_block_queue.remove(block)
                    self.free_block_queue.append(block)
