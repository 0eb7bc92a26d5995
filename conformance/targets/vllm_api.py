"""A target for any pool with vLLM's ``BlockPool`` API: ours, a user's, vLLM's own.

The adapter turns ids into the pool's block objects, builds the few request fields the pool
reads, records reuse-watcher firings, and reads events back into the spec's vocabulary. It
looks at what the pool offers (methods, ``evict_first``, events, block fields) and declares
only that, so a 20-line pool with ``get_new_blocks``/``free_blocks``/``touch``/
``get_cached_block``/``get_num_free_blocks`` and a ``blocks`` list is already a target.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvpool.spec import (
    Action,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    CacheFullBlocks,
    CachePartialBlock,
    Event,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    MoveBlockHashes,
    Observation,
    PeerGetNewBlocks,
    PoolConfig,
    Profile,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)

from ..target import EVICT_FIRST, PoolView
from .free_list import free_list_order, free_list_problems, sentinels

#: ``factory(num_gpu_blocks=..., enable_caching=..., hash_block_size=...,
#: enable_kv_cache_events=...)`` -> a pool with vLLM's BlockPool API.
PoolFactory = Callable[..., Any]

#: The pool methods the adapter can call, named as the spec's operations.
_METHODS = (
    "get_new_blocks",
    "free_blocks",
    "touch",
    "unpin_blocks",
    "cache_full_blocks",
    "cache_partial_block",
    "get_cached_block",
    "evict_blocks",
    "move_block_hashes",
    "reset_prefix_cache",
    "is_block_writable",
    "get_usage",
    "get_num_free_blocks",
    "take_events",
)


@dataclass
class FakeRequest:
    """The fields of a request that a pool reads: its chained hashes and its tokens."""

    block_hashes: list[bytes]
    all_token_ids: list[int]
    request_id: str = "kvpool-request"
    lora_request: None = None
    session_id: None = None
    mm_features: list[Any] = field(default_factory=list)
    cache_salt: None = None


def build_pool(factory: PoolFactory, config: PoolConfig, num_gpu_blocks: int) -> Any:
    return factory(
        num_gpu_blocks=num_gpu_blocks,
        enable_caching=config.enable_caching,
        hash_block_size=config.hash_block_size,
        enable_kv_cache_events=config.enable_kv_cache_events,
    )


def _spec_events(raw: Any) -> list[Event]:
    """One pool event in the spec's vocabulary (a removal of k keys becomes k events)."""
    kind = type(raw).__name__
    group = getattr(raw, "group_idx", None) or 0
    if kind == "BlockStored":
        return [
            BlockStored(
                block_hashes=tuple(raw.block_hashes),
                parent_block_hash=raw.parent_block_hash,
                group_id=group,
                block_size=raw.block_size,
                num_tokens=len(raw.token_ids),
            )
        ]
    if kind == "BlockRemoved":
        return [BlockRemoved(h, group) for h in raw.block_hashes]
    if kind == "AllBlocksCleared":
        return [AllBlocksCleared()]
    raise TypeError(f"unknown KV event type {kind}")


class VllmApiTarget:
    """Drives a pool with vLLM's ``BlockPool`` API."""

    def __init__(
        self,
        factory: PoolFactory,
        config: PoolConfig,
        profile: Profile,
        name: str = "pool",
        check_structure: bool = True,
    ) -> None:
        self.name = name
        self.factory = factory
        self.config = config
        self.profile = profile
        self.pool = build_pool(factory, config, config.num_gpu_blocks)
        self.peer = build_pool(factory, config, config.peer_blocks) if config.peer_blocks else None
        self._fired: list[tuple[int, str]] = []
        self._check_structure = check_structure
        self.operations = self._detect_operations()
        self.observes = self._detect_observables()

    # --- what this pool offers ----------------------------------------------------------

    def _detect_operations(self) -> frozenset[str]:
        ops = {op for op in _METHODS if callable(getattr(self.pool, op, None))}
        free = getattr(self.pool, "free_blocks", None)
        if free is not None and "evict_first" in inspect.signature(free).parameters:
            ops.add(EVICT_FIRST)
        if hasattr(self.pool.blocks[0], "pool"):
            ops.add("peer_get_new_blocks")
        return frozenset(ops)

    def _detect_observables(self) -> frozenset[str]:
        seen = set()
        block = self.pool.blocks[0]
        queue = getattr(self.pool, "free_block_queue", None)
        if queue is not None and (
            free_list_order(queue, len(self.pool.blocks)) is not None
            or hasattr(queue, "get_all_free_blocks")
        ):
            seen.add("free_queue")
        if hasattr(block, "ref_cnt"):
            seen.add("ref_cnt")
        if hasattr(block, "block_hash"):
            seen.add("keys")
        if "take_events" in self.operations:
            seen.add("events")
        if "unpin_blocks" in self.operations:
            seen.add("watchers")
        if "peer_get_new_blocks" in self.operations:
            seen.add("peer")
        if self._check_structure and queue is not None and sentinels(queue) is not None:
            seen.add("structure")
        return frozenset(seen)

    # --- translating ids ----------------------------------------------------------------

    def _blocks(self, ids: tuple[int, ...]) -> list[Any]:
        return [self.pool.blocks[i] for i in ids]

    def _foreign(self, ids: tuple[int, ...]) -> list[Any]:
        if self.peer is not None:
            return [self.peer.blocks[i] for i in ids]
        return [self._orphan_block(i) for i in ids]

    def _orphan_block(self, block_id: int) -> Any:
        """A held block of a pool that no longer exists."""
        gone = build_pool(self.factory, self.config, max(2, block_id + 1))
        gone.get_new_blocks(block_id)
        block = gone.blocks[block_id]
        del gone
        gc.collect()
        return block

    def _request(self, block_hashes: tuple[bytes, ...]) -> FakeRequest:
        tokens = len(block_hashes) * self.config.hash_block_size
        return FakeRequest(block_hashes=list(block_hashes), all_token_ids=list(range(tokens)))

    def _watcher(self, name: str) -> Callable[[Any], None]:
        def on_reuse(block: Any) -> None:
            self._fired.append((block.block_id, name))

        return on_reuse

    # --- the actions --------------------------------------------------------------------

    def apply(self, action: Action) -> Observation:
        self._fired = []
        result = self._dispatch(action)
        fired = tuple(self._fired)
        if isinstance(action, ResetPrefixCache):
            fired = tuple(sorted(fired))
        return Observation(result, fired)

    def _dispatch(self, action: Action) -> Any:
        pool = self.pool
        match action:
            case GetNewBlocks(num_blocks=n):
                return tuple(b.block_id for b in pool.get_new_blocks(n))
            case PeerGetNewBlocks(num_blocks=n):
                assert self.peer is not None
                return tuple(b.block_id for b in self.peer.get_new_blocks(n))
            case FreeBlocks(blocks=ids, evict_first=evict_first, foreign=foreign):
                blocks = self._blocks(ids) + self._foreign(foreign)
                if evict_first:
                    pool.free_blocks(blocks, evict_first=True)
                else:
                    pool.free_blocks(blocks)
                return None
            case Touch(blocks=ids):
                pool.touch(self._blocks(ids))
                return None
            case UnpinBlocks(blocks=ids, watcher=name):
                pool.unpin_blocks(self._blocks(ids), self._watcher(name))
                return None
            case CacheFullBlocks():
                pool.cache_full_blocks(
                    self._request(action.block_hashes),
                    self._blocks(action.blocks),
                    action.num_cached_blocks,
                    action.num_full_blocks,
                    action.block_size,
                    action.group_id,
                    block_mask=list(action.block_mask) if action.block_mask is not None else None,
                )
                return None
            case CachePartialBlock():
                key = pool.cache_partial_block(
                    self._request(action.block_hashes),
                    pool.blocks[action.block],
                    action.num_tokens,
                    action.group_id,
                    action.block_size,
                    replace_existing_hashes=action.replace_existing_hashes,
                )
                return None if key is None else bytes(key)
            case GetCachedBlock(block_hash=block_hash, group_ids=groups):
                hits = pool.get_cached_block(block_hash, list(groups))
                return None if hits is None else tuple(b.block_id for b in hits)
            case EvictBlocks(block_ids=ids):
                pool.evict_blocks(set(ids))
                return None
            case MoveBlockHashes(src=src, dst=dst):
                pool.move_block_hashes(pool.blocks[src], pool.blocks[dst])
                return None
            case ResetPrefixCache():
                return bool(pool.reset_prefix_cache())
            case IsBlockWritable(block=b):
                return bool(pool.is_block_writable(pool.blocks[b]))
            case GetUsage():
                return float(pool.get_usage())
            case GetNumFreeBlocks():
                return int(pool.get_num_free_blocks())
            case TakeEvents():
                return tuple(e for raw in pool.take_events() for e in _spec_events(raw))
        raise TypeError(f"unknown action {action!r}")

    # --- looking inside -----------------------------------------------------------------

    def view(self) -> PoolView:
        return self._view_of(self.pool, with_peer=True)

    def _view_of(self, pool: Any, with_peer: bool) -> PoolView:
        blocks = pool.blocks
        queue = getattr(pool, "free_block_queue", None)
        order: tuple[int, ...] | None = None
        if "free_queue" in self.observes and queue is not None:
            walked = free_list_order(queue, len(blocks))
            if walked is None and "structure" not in self.observes:
                walked = [b.block_id for b in queue.get_all_free_blocks()]
            order = tuple(walked) if walked is not None else None
        ref_cnt = tuple(b.ref_cnt for b in blocks) if "ref_cnt" in self.observes else None
        keys = primary = None
        if "keys" in self.observes:
            extra = getattr(pool, "cached_block_hashes_by_block", {})
            primary = tuple(
                bytes(b.block_hash) if b.block_hash is not None else None for b in blocks
            )
            keys = tuple(
                frozenset(
                    ([p] if p is not None else []) + [bytes(k) for k in extra.get(b.block_id, ())]
                )
                for b, p in zip(blocks, primary, strict=True)
            )
        peer = None
        if with_peer and self.peer is not None and "peer" in self.observes:
            peer = self._view_of(self.peer, with_peer=False)
        return PoolView(
            free_count=int(pool.get_num_free_blocks()),
            free_queue=order,
            ref_cnt=ref_cnt,
            keys=keys,
            primary=primary,
            peer=peer,
        )

    def structure_problems(self) -> list[str]:
        if "structure" not in self.observes:
            return []
        problems = free_list_problems(self.pool.free_block_queue, self.pool.blocks)
        if self.peer is not None:
            peer_problems = free_list_problems(self.peer.free_block_queue, self.peer.blocks)
            problems += [f"peer pool: {p}" for p in peer_problems]
        return problems
