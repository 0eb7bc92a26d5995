"""SGLang's ``RadixCache`` over its ``TokenToKVPoolAllocator``, driven as a KV cache manager.

SGLang caches KV per token: the allocator hands out token slots (page size 1, slots
``1..size`` in a torch tensor, slot 0 kept for padding), and the radix tree maps token
sequences to the slots holding their KV. Its scheduler (0.4.6) drives the two as below;
the adapter makes the same calls in the same order (the scheduler itself is not loaded):

=======================  ================================================================
protocol call            SGLang
=======================  ================================================================
``admit`` / ``resume``   ``match_prefix`` on all tokens but the last (one is always
                         computed), ``inc_lock_ref`` on the node reached, the rest
                         allocated (``evict(n)`` first when the free list is short, as
                         ``alloc_token_slots`` does); ``None`` (lock dropped) when short
``append(tokens)``       a slot per token, evicting the same way
``commit``               after a prefill (the first forward pass since admission or
                         resumption) ``cache_unfinished_req``: ``insert`` the computed
                         tokens, free the request's slots the tree already had, re-match
                         and move the lock; after a decode step (tokens appended since)
                         nothing: decoded tokens are cached when the request finishes
``finish``               ``cache_finished_req``: the same insert, then ``dec_lock_ref``;
                         slots never computed are freed
``preempt``              ``retract_decode``: the slots past the cached prefix freed,
                         ``dec_lock_ref``
``reset_prefix_cache``   not drawn (SGLang flushes only an idle server)
=======================  ================================================================

**Token-granular, as blocks of one token.** The request machine runs it with
``block_size = hash_block_size = 1``: a slot is a block, the key of a slot is the spec's
key of the prefix ending at that token (the tree's path to it). Capacity is kept in
tokens: ``num_gpu_blocks`` of the drawn setup times its block size.

**What it shows.** Per slot: ``lock_ref`` of the tree node holding it as its ref count (the
number of running requests whose matched prefix covers it), 1 for a slot out of the free
list and out of the tree (one request's own), 0 for a free slot; keys of the tree's slots;
``free_count`` as SGLang's own idle check counts it, ``available_size() +
evictable_size()``. The free list's order is not shown (``tail-first-free`` is vLLM's
reuse policy; SGLang's is the tree's LRU over leaves). Structure: ``evictable_size_`` and
``protected_size_`` against the tree (unlocked / locked node sizes), the free list without
repeats and apart from the tree, and every slot in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kvpool.spec import Profile
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.manager import (
    FULL_ATTENTION,
    Admit,
    ManagerConfig,
    RequestAction,
    ResetCache,
    Scheduled,
)
from kvpool.spec.manager.properties import expected_key

from ...manager.target import RequestSetup
from ...target import PoolView
from .release import SglangRelease

OBSERVES = frozenset({"ref_cnt", "keys", "index", "structure"})


def supported_setup(setup: RequestSetup) -> RequestSetup:
    """``setup`` as a token-granular cache: one full-attention group, blocks of one token,
    caching on, the same capacity in tokens."""
    slots = (setup.pool.num_gpu_blocks - 1) * setup.manager.block_size
    pool = replace(setup.pool, enable_caching=True, hash_block_size=1, num_gpu_blocks=slots + 1)
    return RequestSetup(ManagerConfig(1, (FULL_ATTENTION,)), pool)


@dataclass
class _Request:
    tokens: list[int]
    #: The request's slots (SGLang's ``req_to_token`` row).
    slots: list[int] = field(default_factory=list)
    #: ``len(req.prefix_indices)``: the leading slots that belong to the tree.
    prefix_len: int = 0
    last_node: Any = None
    computed: int = 0
    running: bool = True
    #: No forward pass since admission or resumption: the next one is a prefill.
    prefilling: bool = True


class SglangManagerTarget:
    """One ``RadixCache`` and its allocator behind the manager-target protocol."""

    checked_by_properties = True
    observes = OBSERVES
    #: ``cache_unfinished_req`` points a request at the tree's slot where another request
    #: cached the same prefix first (and frees its own copy): a by-design table change.
    swaps_in_cached = True

    def __init__(self, release: SglangRelease, setup: RequestSetup, name: str) -> None:
        import torch

        self.torch = torch
        self.name = name
        self.version = release.label
        self.setup = setup
        self.size = setup.pool.num_gpu_blocks - 1
        allocator_class = release.memory_pool.TokenToKVPoolAllocator
        self.allocator: Any = allocator_class(self.size, torch.float16, "cpu", None)
        cache_class = release.radix_cache.RadixCache
        self.cache: Any = cache_class(None, self.allocator, page_size=1)
        self.requests: dict[str, _Request] = {}
        self._keys: dict[tuple[int, ...], tuple[bytes, ...]] = {}

    # --- SGLang's calls -------------------------------------------------------------------

    def _tensor(self, slots: list[int]) -> Any:
        return self.torch.tensor(slots, dtype=self.torch.int64)

    def _alloc(self, n: int) -> list[int] | None:
        """``alloc_token_slots``: evict ``n`` tokens when the free list is short."""
        if n == 0:
            return []
        if self.allocator.available_size() < n:
            self.cache.evict(n)
        got = self.allocator.alloc(n)
        return None if got is None else [int(s) for s in got.tolist()]

    def _schedule(self, request: _Request) -> Scheduled | None:
        key = request.tokens[: len(request.tokens) - 1]
        prefix, node = self.cache.match_prefix(key=list(key))
        self.cache.inc_lock_ref(node)
        hit = [int(s) for s in prefix.tolist()]
        rest = self._alloc(len(request.tokens) - len(hit))
        if rest is None:
            self.cache.dec_lock_ref(node)
            return None
        request.slots, request.prefix_len, request.last_node = hit + rest, len(hit), node
        request.computed, request.running, request.prefilling = len(hit), True, True
        return self._scheduled(request)

    def _insert_computed(self, request: _Request) -> int:
        """Insert the computed tokens; free the request's duplicates of the tree's slots.
        The new prefix length."""
        tokens, slots = request.tokens[: request.computed], request.slots[: request.computed]
        new_prefix_len = int(self.cache.insert(list(tokens), self._tensor(slots)))
        duplicates = slots[request.prefix_len : new_prefix_len]
        if duplicates:
            self.allocator.free(self._tensor(duplicates))
        return new_prefix_len

    # --- the protocol ---------------------------------------------------------------------

    def allows(self, action: RequestAction) -> bool:
        """It has no salts and the suite never flushes it: neither is drawn."""
        if isinstance(action, ResetCache):
            return False
        return not (isinstance(action, Admit) and action.salt is not None)

    def admit(self, request_id: str, tokens: tuple[int, ...], salt: str | None) -> Scheduled | None:
        if salt is not None:
            raise NotImplementedError("SGLang's RadixCache has no salt")
        request = _Request(list(tokens))
        result = self._schedule(request)
        if result is not None:
            self.requests[request_id] = request
        return result

    def resume(self, request_id: str) -> Scheduled | None:
        return self._schedule(self.requests[request_id])

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        request = self.requests[request_id]
        more = self._alloc(len(tokens))
        if more is None:
            return None
        request.tokens += tokens
        request.slots += more
        return self._scheduled(request)

    def prepare_write(self, request_id: str) -> Scheduled | None:
        return self._scheduled(self.requests[request_id])

    def copies_done(self, request_id: str) -> None:
        return None

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        """``cache_unfinished_req`` after a prefill; nothing after a decode step."""
        request = self.requests[request_id]
        request.computed = len(request.tokens)
        if not request.prefilling:
            return self._scheduled(request)
        request.prefilling = False
        self._insert_computed(request)
        found, node = self.cache.match_prefix(key=list(request.tokens))
        found_slots = [int(s) for s in found.tolist()]
        request.slots[request.prefix_len : len(found_slots)] = found_slots[request.prefix_len :]
        self.cache.dec_lock_ref(request.last_node)
        self.cache.inc_lock_ref(node)
        request.prefix_len, request.last_node = len(found_slots), node
        return self._scheduled(request)

    def preempt(self, request_id: str) -> None:
        """``retract_decode``."""
        request = self.requests[request_id]
        own = request.slots[request.prefix_len :]
        if own:
            self.allocator.free(self._tensor(own))
        self.cache.dec_lock_ref(request.last_node)
        request.slots, request.prefix_len, request.last_node = [], 0, None
        request.computed, request.running = 0, False

    def finish(self, request_id: str) -> None:
        """``cache_finished_req`` (slots never computed freed first)."""
        request = self.requests.pop(request_id)
        if not request.running:
            return
        never = request.slots[request.computed :]
        if never:
            self.allocator.free(self._tensor(never))
        self._insert_computed(request)
        self.cache.dec_lock_ref(request.last_node)

    def reset_prefix_cache(self) -> bool:
        raise NotImplementedError("the suite does not flush SGLang's cache")

    def keyed_tokens(self, request_id: str) -> int:
        """How many leading tokens of the request the tree holds for it (its locked
        prefix): decoded tokens join only when it finishes."""
        return self.requests[request_id].prefix_len

    def is_block_writable(self, block: int) -> bool:
        """A slot out of the tree and out of the free list, in exactly one running
        request's table (SGLang has no such query: its engine writes every slot it
        allocated)."""
        if block < 1 or block > self.size or block in self._tree_slots():
            return False
        if block in set(int(s) for s in self.allocator.free_slots.tolist()):
            return False
        holders = sum(r.slots.count(block) for r in self.requests.values() if r.running)
        return holders == 1

    def _scheduled(self, request: _Request) -> Scheduled:
        return Scheduled(request.computed, (tuple(request.slots),))

    # --- looking inside -------------------------------------------------------------------

    def _nodes(self) -> list[tuple[Any, tuple[int, ...]]]:
        """Every node but the root with the tokens of the path ending at it."""
        found: list[tuple[Any, tuple[int, ...]]] = []
        stack: list[tuple[Any, tuple[int, ...]]] = [(self.cache.root_node, ())]
        while stack:
            node, path = stack.pop()
            for child in node.children.values():
                child_path = path + tuple(int(t) for t in child.key)
                found.append((child, child_path))
                stack.append((child, child_path))
        return found

    def _tree_slots(self) -> dict[int, tuple[Any, bytes]]:
        """slot -> (node, the spec's key of the prefix ending at its token)."""
        slots: dict[int, tuple[Any, bytes]] = {}
        for node, path in self._nodes():
            keys = self._path_keys(path)
            start = len(path) - len(node.key)
            for i, slot in enumerate(node.value.tolist()):
                slots[int(slot)] = (node, keys[start + i])
        return slots

    def _path_keys(self, path: tuple[int, ...]) -> tuple[bytes, ...]:
        keys = self._keys.get(path)
        if keys is None:
            hashes = request_block_hashes(path, 1, None)
            keys = tuple(expected_key(hashes, 1, 1, i, 0) for i in range(len(path)))
            self._keys[path] = keys
        return keys

    def view(self) -> PoolView:
        tree = self._tree_slots()
        free = set(int(s) for s in self.allocator.free_slots.tolist())
        ref_cnt = [0]
        keys: list[frozenset[bytes]] = [frozenset()]
        primary: list[bytes | None] = [None]
        for slot in range(1, self.size + 1):
            if slot in tree:
                node, key = tree[slot]
                ref_cnt.append(int(node.lock_ref))
                keys.append(frozenset([key]))
                primary.append(key)
            else:
                ref_cnt.append(0 if slot in free else 1)
                keys.append(frozenset())
                primary.append(None)
        index = tuple(sorted((key, (slot,)) for slot, (_, key) in tree.items()))
        free_count = int(self.allocator.available_size()) + int(self.cache.evictable_size())
        return PoolView(
            free_count=free_count,
            ref_cnt=tuple(ref_cnt),
            keys=tuple(keys),
            primary=tuple(primary),
            index=index,
        )

    def structure_problems(self) -> list[str]:
        problems: list[str] = []
        evictable = protected = 0
        tree_slots: list[int] = []
        for node, _ in self._nodes():
            size = len(node.value)
            tree_slots += [int(s) for s in node.value.tolist()]
            if node.lock_ref > 0:
                protected += size
            else:
                evictable += size
            if node.lock_ref < 0:
                problems.append(f"a tree node holding {size} slots has lock_ref {node.lock_ref}")
        if self.cache.evictable_size() != evictable:
            problems.append(
                f"invariant 'evictable-size-matches-tree': evictable_size() is "
                f"{self.cache.evictable_size()} but the unlocked nodes hold {evictable} slots"
            )
        if self.cache.protected_size() != protected:
            problems.append(
                f"invariant 'protected-size-matches-tree': protected_size() is "
                f"{self.cache.protected_size()} but the locked nodes hold {protected} slots"
            )
        free = [int(s) for s in self.allocator.free_slots.tolist()]
        if len(free) != len(set(free)):
            problems.append(f"invariant 'free-list-once': the free list repeats a slot: {free}")
        if len(tree_slots) != len(set(tree_slots)):
            problems.append("invariant 'tree-slot-once': two tree nodes hold the same slot")
        both = sorted(set(free) & set(tree_slots))
        if both:
            problems.append(f"invariant 'free-apart-from-tree': slots {both} are free and cached")
        own = [s for r in self.requests.values() if r.running for s in r.slots[r.prefix_len :]]
        placed = len(set(free) | set(tree_slots) | set(own))
        if placed != self.size or len(free) + len(tree_slots) + len(own) != self.size:
            problems.append(
                f"invariant 'slots-accounted': {len(free)} free + {len(tree_slots)} cached + "
                f"{len(own)} requests' own slots, of {self.size}"
            )
        return problems


class SglangManagerFactory:
    """Builds a :class:`SglangManagerTarget` per test case from one loaded release."""

    checked_by_properties = True

    def __init__(self, release: SglangRelease, name: str) -> None:
        self.release = release
        self.name = name

    @staticmethod
    def supported_setup(setup: RequestSetup) -> RequestSetup:
        return supported_setup(setup)

    def __call__(self, setup: RequestSetup, profile: Profile) -> SglangManagerTarget:
        return SglangManagerTarget(self.release, supported_setup(setup), self.name)
