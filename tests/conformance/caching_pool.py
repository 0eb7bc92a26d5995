"""A caching pool written from the docs alone (the operation pages' "call a pool
implements" sections and "what the suite reads from a pool"), as a pool author would: a
prefix cache with a multimap index, LIFO for blocks without a key and LRU for cached ones,
and none of the optional arguments (no ``evict_first``, no ``block_mask``)."""

from __future__ import annotations

from typing import Any


class Block:
    def __init__(self, block_id: int) -> None:
        self.block_id, self.ref_cnt = block_id, 0
        self.block_hash: bytes | None = None


class CachingPool:
    def __init__(
        self, num_gpu_blocks: int, enable_caching: bool, hash_block_size: int, **_: Any
    ) -> None:
        self.blocks = [Block(i) for i in range(num_gpu_blocks)]
        self.free = self.blocks[1:]  # front first; block 0 is the null block
        self.caching, self.hash_block_size = enable_caching, hash_block_size
        self.cached_block_hash_to_block: dict[bytes, list[Block]] = {}

    def _real(self, blocks: Any) -> list[Block]:
        return [b for b in blocks if b.block_id != 0]

    def _drop_key(self, block: Block) -> None:
        if block.block_hash is not None:
            entry = self.cached_block_hash_to_block[block.block_hash]
            entry.remove(block)
            if not entry:
                del self.cached_block_hash_to_block[block.block_hash]
            block.block_hash = None

    def get_new_blocks(self, num_blocks: int) -> list[Block]:
        if not 0 <= num_blocks <= len(self.free):
            raise ValueError(f"cannot hand out {num_blocks} blocks")
        taken, self.free = self.free[:num_blocks], self.free[num_blocks:]
        for block in taken:
            self._drop_key(block)
            block.ref_cnt = 1
        return taken

    def free_blocks(self, ordered_blocks: Any) -> None:
        blocks = self._real(ordered_blocks)
        if any(blocks.count(b) > b.ref_cnt for b in blocks):
            raise ValueError("a block is released more often than it is held")
        front, back = [], []
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                cached = self.caching and block.block_hash is not None
                (back if cached else front).append(block)
        self.free = front + self.free + back

    def touch(self, blocks: Any) -> None:
        for block in self._real(blocks):
            if block.ref_cnt == 0:
                self.free.remove(block)
            block.ref_cnt += 1

    def cache_full_blocks(
        self,
        request: Any,
        blocks: Any,
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        kv_cache_group_id: int,
    ) -> None:
        if not self.caching:
            raise ValueError("prefix caching is off")
        scale = block_size // self.hash_block_size
        for i in range(num_cached_blocks, num_full_blocks):
            block = blocks[i]
            if block.block_id == 0:
                continue
            if block.ref_cnt < 1:
                raise ValueError(f"block {block.block_id} is not held")
            key = request.block_hashes[(i + 1) * scale - 1] + kv_cache_group_id.to_bytes(4, "big")
            self._drop_key(block)
            block.block_hash = key
            self.cached_block_hash_to_block.setdefault(key, []).append(block)

    def get_cached_block(self, block_hash: bytes, kv_cache_group_ids: Any) -> list[Block] | None:
        hits = []
        for group in kv_cache_group_ids:
            entry = self.cached_block_hash_to_block.get(block_hash + group.to_bytes(4, "big"))
            if not entry:
                return None
            hits.append(entry[0])
        return hits

    def get_num_free_blocks(self) -> int:
        return len(self.free)


class CachingPoolMRU(CachingPool):
    """The one bug: a freed cached block goes to the front, so the most recently used
    prefix is evicted first."""

    def free_blocks(self, ordered_blocks: Any) -> None:
        before = list(self.free)
        super().free_blocks(ordered_blocks)
        back = [b for b in self.free[len(before) :] if b not in before]
        self.free = back + self.free[: len(self.free) - len(back)]
