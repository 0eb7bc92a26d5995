"""Planted faults at the request level: our KV cache manager with one real bug each.

Each class changes one hook of ``kvpool.impl.KVCacheManager`` the way schedulers get it
wrong. ``make_NAME`` builds it as a manager target; passed to ``kvpool conform --manager
faulty_managers:make_NAME``, each must be caught (``test_conform_requests`` holds the table
of which property catches which).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from kvpool.conformance.engines.builtin.impl_manager import ManagerApiTarget, build_impl_manager
from kvpool.conformance.machines.pool.target import PoolView
from kvpool.conformance.machines.requests.target import RequestSetup
from kvpool.impl import BlockPool, KVCacheBlock, KVCacheManager
from kvpool.impl.events import BlockRemoved, KVCacheEvent
from kvpool.impl.hashing import generate_block_hash_extra_keys
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
            request.shown = None  # the tables changed (as every change of block_ids says)
            request.pending_release.append(src)
            copies.append((src.block_id, dst.block_id))
        return copies


class SaltIgnored(KVCacheManager):
    """Hashes a prompt without its ``cache_salt``: another tenant's blocks are hit."""

    def _extra_keys(self, req: ManagedRequest, start: int, end: int) -> tuple[object, ...] | None:
        return generate_block_hash_extra_keys(
            start, end, None, req.lora, req.mm_features, req.prompt_embeds
        )


class LoraIgnored(KVCacheManager):
    """Hashes a prompt without its LoRA adapter: KV computed under another adapter is hit."""

    def _extra_keys(self, req: ManagedRequest, start: int, end: int) -> tuple[object, ...] | None:
        return generate_block_hash_extra_keys(
            start, end, req.salt, None, req.mm_features, req.prompt_embeds
        )


class ImageOffsetIgnored(KVCacheManager):
    """Keys the images in a block by identifier only (vLLM before the offsets): the same
    image at another place among the same placeholder tokens hits the other's block."""

    def _extra_keys(self, req: ManagedRequest, start: int, end: int) -> tuple[object, ...] | None:
        keys = super()._extra_keys(req, start, end) or ()
        kept = tuple(k for k in keys if not (isinstance(k, tuple) and k[0] == "mm-offset"))
        return kept or None


class EmbedsIgnored(KVCacheManager):
    """Hashes a prompt given as embeddings by its placeholder token ids alone."""

    def _extra_keys(self, req: ManagedRequest, start: int, end: int) -> tuple[object, ...] | None:
        return generate_block_hash_extra_keys(start, end, req.salt, req.lora, req.mm_features)


class NeverShares(KVCacheManager):
    """Puts the request id into every block hash: correct, and no request ever hits
    another's blocks (the fault the positive control exists for)."""

    def _extra_keys(self, req: ManagedRequest, start: int, end: int) -> tuple[object, ...] | None:
        return (req.request_id, super()._extra_keys(req, start, end))


class PairedKeys(ManagerApiTarget):
    """Shows its keys in the spec's hashes through a pairing of each request's hashes, as
    vLLM's manager is read: a hasher that differs from the spec's is then judged by the
    request-level properties, not by the keys' bytes."""

    def __init__(self, manager: KVCacheManager, setup: RequestSetup, profile: Profile) -> None:
        super().__init__(manager, setup, profile, f"paired {type(manager).__name__}", paired=True)


class HiddenKeys(ManagerApiTarget):
    """Shows no keys at all (a black box, as far as the prefix cache goes): it is judged by
    what requests read, which ``keys-partitioned`` checks without keys."""

    def view(self) -> PoolView:
        return replace(super().view(), keys=None, primary=None, index=None, lookups=None)


def paired(manager_class: type[KVCacheManager]) -> Any:
    def make(setup: RequestSetup, profile: Profile) -> PairedKeys:
        return PairedKeys(build_impl_manager(manager_class, setup), setup, profile)

    # its hashes may pair several of its keys with one of the spec's (a finer hasher), so
    # its pool is not compared with the spec's key for key: the properties judge it
    make.checked_by_properties = True  # type: ignore[attr-defined]
    return make


def hidden(manager_class: type[KVCacheManager]) -> Any:
    def make(setup: RequestSetup, profile: Profile) -> HiddenKeys:
        manager = build_impl_manager(manager_class, setup)
        return HiddenKeys(manager, setup, profile, f"hidden {manager_class.__name__}")

    make.checked_by_properties = True  # type: ignore[attr-defined]
    return make


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
make_LoraIgnored = _target(LoraIgnored)
make_ImageOffsetIgnored = _target(ImageOffsetIgnored)
make_EmbedsIgnored = _target(EmbedsIgnored)
make_NeverShares = _target(NeverShares)

#: Each planted fault, and what must catch it (a property, by name).
CAUGHT_BY = {
    "AllocateBeforeTouch": "property '",
    "HeadFirstFree": "property 'tail-first-free'",
    "WritesRegisteredTail": "property 'write-guard'",
    "CopyRewritesTable": "property 'append-only'",
    "SaltIgnored": "property 'hit-keys'",
    "EvictionsUnpublished": "property 'events-replay-index' broken for the count consumer",
}
