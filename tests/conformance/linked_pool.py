"""A pool written from the docs whose blocks name the pool that made them, for bookkeeping
only: it hands out and takes back its own blocks, refuses anything else, and knows nothing
of any other pool (a block attribute named ``pool`` that is not vLLM 0.30's routing)."""

from __future__ import annotations

from collections import Counter
from typing import Any


class Block:
    def __init__(self, block_id: int, pool: LinkedPool) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.pool = pool


class LinkedPool:
    def __init__(self, num_gpu_blocks: int, **_: Any) -> None:
        self.blocks = [Block(i, self) for i in range(num_gpu_blocks)]
        self.free = list(range(1, num_gpu_blocks))  # block 0 is the null block

    def get_new_blocks(self, num_blocks: int) -> list[Block]:
        if not 0 <= num_blocks <= len(self.free):
            raise ValueError(f"cannot get {num_blocks} free blocks")
        taken, self.free = self.free[:num_blocks], self.free[num_blocks:]
        for i in taken:
            self.blocks[i].ref_cnt += 1
        return [self.blocks[i] for i in taken]

    def free_blocks(self, ordered_blocks: list[Block]) -> None:
        ids = [b.block_id for b in ordered_blocks if b.block_id != 0]
        for i, times in Counter(ids).items():
            if self.blocks[i].ref_cnt < times:
                raise ValueError(f"block {i} is freed more often than it is held")
        freed = []
        for i in ids:
            self.blocks[i].ref_cnt -= 1
            if self.blocks[i].ref_cnt == 0:
                freed.append(i)
        self.free = freed + self.free  # to the front, in the order given

    def get_num_free_blocks(self) -> int:
        return len(self.free)
