"""Planted faults at the request level: our KV cache manager with one real bug each.

Each class changes one hook of ``kvpool.impl.KVCacheManager`` the way schedulers get it
wrong. ``make_NAME`` builds it as a manager target; passed to ``kvpool conform --manager
faulty_managers:make_NAME``, each must be caught (``test_conform_requests`` holds the table
of which property catches which).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvpool.conformance.manager.target import RequestSetup
from kvpool.conformance.targets.impl_manager import ManagerApiTarget, build_impl_manager
from kvpool.impl import KVCacheBlock, KVCacheManager
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

#: Each planted fault, and what must catch it (a property, by name).
CAUGHT_BY = {
    "AllocateBeforeTouch": "property '",
    "HeadFirstFree": "property 'tail-first-free'",
    "WritesRegisteredTail": "property 'write-guard'",
    "CopyRewritesTable": "property 'append-only'",
    "SaltIgnored": "property 'hit-keys'",
}
