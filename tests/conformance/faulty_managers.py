"""Planted faults at the request level: our KV cache manager with one real bug each.

Each class changes one hook of ``kvpool.impl.KVCacheManager`` the way schedulers get it
wrong. ``make_NAME`` builds it as a manager target; passed to ``kvpool conform --manager
faulty_managers:make_NAME``, each must be caught (``test_conform_requests`` holds the table
of which property catches which).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kvpool.conformance.manager.target import RequestSetup
from kvpool.conformance.targets.impl_manager import ManagerApiTarget, build_impl_manager
from kvpool.impl import BlockPool, KVCacheBlock, KVCacheManager
from kvpool.impl.events import BlockRemoved, KVCacheEvent
from kvpool.impl.kv_cache_manager import ManagedRequest
from kvpool.spec import Profile


class AllocateBeforeTouch(KVCacheManager):
    """Allocates the new blocks before touching the hits: an allocation can evict a free
    hit the request is about to use."""

    def _touch_and_allocate(
        self, hits: Sequence[KVCacheBlock], per_group: int
    ) -> list[list[KVCacheBlock]]:
        new = self._allocate(per_group)
        if hits:
            self.block_pool.touch(hits)
        return new


class HeadFirstFree(KVCacheManager):
    """Frees a request's blocks head first: its most shared blocks are evicted first."""

    def _free_tables(self, tables: Iterable[Sequence[KVCacheBlock]]) -> None:
        for table in tables:
            blocks = [b for b in table if not b.is_null]
            if blocks:
                self.block_pool.free_blocks(blocks)


class WritesRegisteredTail(KVCacheManager):
    """Skips the running copy-on-write: the engine writes into a block registered as a
    partial entry, corrupting what its key promises."""

    def _prepare_running_copy(
        self, request: ManagedRequest, tails: Sequence[tuple[int, KVCacheBlock]]
    ) -> list[tuple[int, int]]:
        return []


class CopyRewritesTable(KVCacheManager):
    """Does the running copy-on-write like the not-yet-running one: the table entry is
    swapped for the copy, so a running request's table changes under it."""

    def _prepare_running_copy(
        self, request: ManagedRequest, tails: Sequence[tuple[int, KVCacheBlock]]
    ) -> list[tuple[int, int]]:
        index = request.num_computed_tokens // self.block_size
        copies = []
        for group, src in tails:
            (dst,) = self.block_pool.get_new_blocks(1)
            request.blocks[group][index] = dst
            request.block_ids[group][index] = dst.block_id
            request.pending_release.append(src)
            copies.append((src.block_id, dst.block_id))
        return copies


class SaltIgnored(KVCacheManager):
    """Hashes a prompt without its ``cache_salt``: another tenant's blocks are hit."""

    def _block_hashes(self, tokens: Sequence[int], salt: str | None) -> list[bytes]:
        return super()._block_hashes(tokens, None)


class UnpublishedEvictionPool(BlockPool):
    """Publishes no ``BlockRemoved``: a KV-event consumer (a router's view of the cache)
    keeps believing an evicted block is cached."""

    def take_events(self) -> list[KVCacheEvent]:
        return [e for e in super().take_events() if not isinstance(e, BlockRemoved)]


class EvictionsUnpublished(KVCacheManager):
    """Our manager over :class:`UnpublishedEvictionPool` (its pool is otherwise ours): only
    the manager-level comparison of KV events can see it."""

    def __init__(self, num_gpu_blocks: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(num_gpu_blocks, *args, **kwargs)
        pool = self.block_pool
        self.block_pool = UnpublishedEvictionPool(
            num_gpu_blocks,
            pool.enable_caching,
            hash_block_size=pool.hash_block_size,
            enable_kv_cache_events=pool.enable_kv_cache_events,
        )
        self.null_block = self.block_pool.null_block


def _target(manager_class: type[KVCacheManager]) -> object:
    def make(setup: RequestSetup, profile: Profile) -> ManagerApiTarget:
        manager = build_impl_manager(manager_class, setup)
        return ManagerApiTarget(manager, setup, profile, manager_class.__name__)

    return make


make_AllocateBeforeTouch = _target(AllocateBeforeTouch)
make_HeadFirstFree = _target(HeadFirstFree)
make_WritesRegisteredTail = _target(WritesRegisteredTail)
make_CopyRewritesTable = _target(CopyRewritesTable)
make_SaltIgnored = _target(SaltIgnored)
make_EvictionsUnpublished = _target(EvictionsUnpublished)

#: Each planted fault, and what must catch it (a property, by name).
CAUGHT_BY = {
    "AllocateBeforeTouch": "property '",
    "HeadFirstFree": "property 'tail-first-free'",
    "WritesRegisteredTail": "property 'write-guard'",
    "CopyRewritesTable": "property 'append-only'",
    "SaltIgnored": "property 'hit-keys'",
    "EvictionsUnpublished": "KV events differ",
}
