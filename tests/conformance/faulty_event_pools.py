"""Planted stream faults: our pool with one wrong KV event each, and nothing else wrong.

Each class breaks one property of :data:`kvpool.spec.EVENT_PROPERTIES` the way a real pool
could; ``test_events_level`` runs the events level on each and expects that property.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvpool.impl import AllBlocksCleared, BlockPool, BlockStored


class ForgetsRemoval(BlockPool):
    """A key leaves the cache and no ``BlockRemoved`` says so: subscribers keep routing to
    a prefix the pool lost."""

    def _emit_removed(self, block_hash: bytes, group: int) -> None:
        return None


class RemovesTwice(BlockPool):
    """Every removal is published twice: the second names a hash nobody holds."""

    def _emit_removed(self, block_hash: bytes, group: int) -> None:
        super()._emit_removed(block_hash, group)
        super()._emit_removed(block_hash, group)


#: A hash no request ever has.
STRANGER = b"\xee" * 32


class NamesUnknownParent(BlockPool):
    """A request's first stored blocks name a parent hash nobody was told of (instead of
    none)."""

    def cache_full_blocks(self, *args: Any, **kwargs: Any) -> None:
        before = len(self.kv_event_queue)
        super().cache_full_blocks(*args, **kwargs)
        for i in range(before, len(self.kv_event_queue)):
            event = self.kv_event_queue[i]
            if isinstance(event, BlockStored) and event.parent_block_hash is None:
                self.kv_event_queue[i] = replace(event, parent_block_hash=STRANGER)


class ClearKeepsKeys(BlockPool):
    """An idle reset publishes ``AllBlocksCleared`` and reports success, but keeps every
    key: subscribers forget prefixes the pool still serves."""

    def reset_prefix_cache(self) -> bool:
        if self.free_block_queue.num_free_blocks != self.num_gpu_blocks - 1:
            return False
        pending = list(self._reuse_watchers.items())
        self._reuse_watchers.clear()
        for block_id, watcher in pending:  # the watchers fire, as in a real reset
            watcher(self.blocks[block_id])
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True


#: Fault -> the properties the events level may report for it (count consumer): a removal
#: published twice names a hash nobody holds, or, where the hash has a second copy, takes
#: that copy from the consumer while the pool keeps it.
BREAKS = {
    "ForgetsRemoval": ("events-replay-index",),
    "RemovesTwice": ("events-removed-known", "events-replay-index"),
    "NamesUnknownParent": ("events-parent-known",),
    "ClearKeepsKeys": ("events-cleared-empty",),
}
