"""A user's pool module, copied into each fresh project as ``mypool.py``.

``make_pool`` builds a small pool with vLLM's BlockPool API and no prefix cache that
conforms at every level (it refuses out-of-contract calls and stays unchanged);
``ReversedFree`` is the same pool with one planted bug: a batch of freed blocks is queued
in reverse order, which only the order level sees.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class Block:
    def __init__(self, block_id: int) -> None:
        self.block_id, self.ref_cnt, self.is_null = block_id, 0, block_id == 0


class SmallPool:
    def __init__(self, num_gpu_blocks: int, **_: Any) -> None:
        self.blocks = [Block(i) for i in range(num_gpu_blocks)]
        self.free = self.blocks[1:]

    def get_new_blocks(self, n: int) -> list[Block]:
        if not 0 <= n <= len(self.free):
            raise ValueError(f"cannot get {n} of {len(self.free)} free blocks")
        taken, self.free = self.free[:n], self.free[n:]
        for block in taken:
            block.ref_cnt = 1
        return taken

    def free_blocks(self, blocks: list[Block]) -> None:
        held = [b for b in blocks if not b.is_null]
        for block, times in Counter(held).items():
            if times > block.ref_cnt:
                raise ValueError(f"block {block.block_id} freed {times}x, held {block.ref_cnt}x")
        released = []
        for block in held:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                released.append(block)
        self.free = released + self.free

    def touch(self, blocks: list[Block]) -> None:
        for block in blocks:
            if not block.is_null and block.ref_cnt == 0:
                raise ValueError(f"block {block.block_id} is free: not a cache hit")
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1

    def get_cached_block(self, block_hash: bytes, groups: list[int]) -> None:
        return None

    def get_num_free_blocks(self) -> int:
        return len(self.free)


def make_pool(**options: Any) -> SmallPool:
    return SmallPool(**options)


class ReversedFree(SmallPool):
    def free_blocks(self, blocks: list[Block]) -> None:
        super().free_blocks(list(reversed(blocks)))
