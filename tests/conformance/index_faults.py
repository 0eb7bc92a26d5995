"""Four faults of the prefix-cache index, planted in our pool and in vLLM 0.33.0's.

A block that stays in the index after it lost its key, or a lookup that still answers with
it, hands the next request with that prefix another request's KV. Each fault exists twice:
as a subclass of ``kvpool.impl.BlockPool`` (a copy of one method with the fault in it) and
as a one- or two-line edit of vLLM 0.33.0's ``block_pool.py``, applied to a copy of the
cached release (:func:`planted_vllm_tree`) and loaded as ``vllm@PATH``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvpool.impl import AllBlocksCleared, BlockPool, KVCacheBlock
from kvpool.impl.hashing import get_block_hash, get_group_id


class DuplicateKeptOnEviction(BlockPool):
    """Evicting a block whose key has duplicates leaves it under that key in the index."""

    def _remove_all_keys(self, block: KVCacheBlock) -> None:
        primary, group = block._key_hash, block._key_group
        if primary is None:
            return
        table = self.cached_block_hash_to_block
        if len(table.blocks_under(primary, group)) == 1:  # the fault: a duplicate stays
            table.discard(primary, group, block)
        block._key_hash = block._block_hash_num_tokens = None
        extras = self.cached_block_hashes_by_block.pop(block.block_id, None) or ()
        if self.enable_kv_cache_events:
            self._emit_removed(primary, group)
        for key in extras:
            table.pop(key, block.block_id)
            if self.enable_kv_cache_events:
                self._emit_removed(get_block_hash(key), get_group_id(key))


class ResetKeepsIndex(BlockPool):
    """``reset_prefix_cache`` strips every block's keys but keeps the index."""

    def reset_prefix_cache(self) -> bool:
        if self.free_block_queue.num_free_blocks != self.num_gpu_blocks - 1:
            return False
        self.cached_block_hashes_by_block.clear()
        for block in self.blocks:
            block.reset_hash()
        pending = list(self._reuse_watchers.items())
        self._reuse_watchers.clear()
        for block_id, watcher in pending:
            watcher(self.blocks[block_id])
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True


class LookupServesDroppedBlock(BlockPool):
    """``get_cached_block`` remembers what it answered and, when the key is gone (evicted,
    reset, moved away), answers with that block again."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.served: dict[tuple[bytes, int], KVCacheBlock] = {}

    def get_cached_block(
        self, block_hash: bytes, kv_cache_group_ids: Iterable[int]
    ) -> list[KVCacheBlock] | None:
        out = []
        for group in kv_cache_group_ids:
            hits = super().get_cached_block(block_hash, [group])
            block = hits[0] if hits else self.served.get((block_hash, group))
            if block is None:
                return None
            self.served[(block_hash, group)] = block
            out.append(block)
        return out


class ExtraKeysLeftInIndex(BlockPool):
    """``_remove_all_keys`` without the line that drops a block's extra keys from the index
    (the events for them are still sent)."""

    def _remove_all_keys(self, block: KVCacheBlock) -> None:
        primary, group = block._key_hash, block._key_group
        if primary is None:
            return
        self.cached_block_hash_to_block.discard(primary, group, block)
        block._key_hash = block._block_hash_num_tokens = None
        extras = self.cached_block_hashes_by_block.pop(block.block_id, None) or ()
        if self.enable_kv_cache_events:
            self._emit_removed(primary, group)
            for key in extras:
                self._emit_removed(get_block_hash(key), get_group_id(key))


#: Fault name -> (our pool with it, the edit of vLLM 0.33.0's block_pool.py: old, new).
FAULTS: dict[str, tuple[type[BlockPool], tuple[str, str]]] = {
    "duplicate kept on eviction": (
        DuplicateKeptOnEviction,
        (
            "            block = blocks.pop(block_id, None)\n",
            "            block = blocks.get(block_id)\n",
        ),
    ),
    "index kept across reset": (
        ResetKeepsIndex,
        (
            "        self.cached_block_hash_to_block = BlockHashToBlockMap()\n",
            "",
        ),
    ),
    "lookup served from a dropped key": (
        LookupServesDroppedBlock,
        (
            "            block = self.cached_block_hash_to_block.get_one_block(\n"
            "                block_hash_with_group_id\n"
            "            )\n",
            "            served = self.__dict__.setdefault('served', {})\n"
            "            block = self.cached_block_hash_to_block.get_one_block(\n"
            "                block_hash_with_group_id\n"
            "            ) or served.get(block_hash_with_group_id)\n"
            "            served[block_hash_with_group_id] = block\n",
        ),
    ),
    "extra keys left in the index": (
        ExtraKeysLeftInIndex,
        (
            "        block_hashes.extend("
            "self.cached_block_hashes_by_block.pop(block.block_id, ()))\n",
            "        self.cached_block_hashes_by_block.pop(block.block_id, ())\n",
        ),
    ),
}


def planted_vllm_tree(release: Path, where: Path, edit: tuple[str, str] | None) -> Path:
    """A copy of the release tree at ``release`` under ``where`` with ``edit`` made once
    in its ``block_pool.py`` (none: an unchanged copy); the path to pass as ``vllm@PATH``."""
    tree = where / "vllm-tree"
    shutil.copytree(release, tree)
    if edit is None:
        return tree
    pool = tree / "vllm" / "v1" / "core" / "block_pool.py"
    old, new = edit
    source = pool.read_text()
    if source.count(old) != 1:
        raise ValueError(f"the edit's old text occurs {source.count(old)} times, not once")
    pool.write_text(source.replace(old, new))
    return tree


class HiddenIndex:
    """The pool ``pool_class(**arguments)`` with its index out of the adapter's sight: every
    attribute but ``cached_block_hash_to_block`` is the pool's own, so the adapter can only
    probe the index through the pool's lookups."""

    def __init__(self, pool_class: type, **arguments: object) -> None:
        self.pool = pool_class(**arguments)

    def __getattr__(self, name: str) -> Any:
        if name == "cached_block_hash_to_block":
            raise AttributeError(f"{type(self).__name__} hides {name}")
        return getattr(self.pool, name)
