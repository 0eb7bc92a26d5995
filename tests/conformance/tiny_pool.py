"""A 20-line pool with vLLM's BlockPool API, as a user would bring one (no prefix cache)."""

from __future__ import annotations

from typing import Any


class Block:
    def __init__(self, block_id: int) -> None:
        self.block_id, self.ref_cnt, self.is_null = block_id, 0, block_id == 0


class TinyPool:
    def __init__(self, num_gpu_blocks: int, **_: Any) -> None:
        self.blocks = [Block(i) for i in range(num_gpu_blocks)]
        self.free = self.blocks[1:]

    def get_new_blocks(self, n: int) -> list[Block]:
        if not 0 <= n <= len(self.free):
            raise ValueError(f"cannot get {n} blocks")
        taken, self.free = self.free[:n], self.free[n:]
        for block in taken:
            block.ref_cnt = 1
        return taken

    def free_blocks(self, blocks: list[Block]) -> None:
        released = []
        for block in blocks:
            if not block.is_null:
                block.ref_cnt -= 1
                if block.ref_cnt == 0:
                    released.append(block)
        self.free = released + self.free

    def touch(self, blocks: list[Block]) -> None:
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1

    def get_cached_block(self, block_hash: bytes, groups: list[int]) -> None:
        return None

    def get_num_free_blocks(self) -> int:
        return len(self.free)


class TinyPoolReversedFree(TinyPool):
    """The one bug: a batch of freed blocks is queued in reverse order."""

    def free_blocks(self, blocks: list[Block]) -> None:
        super().free_blocks(list(reversed(blocks)))
