"""What a ``RadixCache`` shows the request-level properties, and its KV events as the spec's.

The tree's shape is the same from 0.4 to 0.5 (nodes with ``children``, a ``key`` of
tokens, a ``value`` tensor of token slots, ``lock_ref``; ``root_node``,
``evictable_size()``, ``protected_size()``), and so is the allocator's (a tensor of free
slots or pages). :class:`SglangTreeView` reads them for the request machine's adapter of
0.4 (:mod:`.manager`; from 0.5 on SGLang runs only at the engine machine, whose driver
reads its own outputs); the event conversion, the native hash check and the page chain the
tree holds under its recorder's hashes (:func:`event_parents`, 0.5 on) serve both.

**What it shows.** Per page: ``lock_ref`` of the tree node holding it as its ref count
(the number of running requests whose matched prefix covers it), 1 for a page out of the
free list and out of the tree (one request's own), 0 for a free page; keys of the tree's
pages (the spec's key of the prefix ending at the page, the node's salt as the request's);
``free_count`` as SGLang's own idle check counts it, ``available_size() +
evictable_size()``, in pages. The free list's order is not shown (``tail-first-free`` is
vLLM's reuse policy; SGLang's is the tree's LRU over leaves). Structure:
``evictable_size_`` and ``protected_size_`` against the tree (unlocked / locked node
sizes), whole pages in every node, the free list without repeats and apart from the tree,
and every page in exactly one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import ModuleType
from typing import Any, Protocol

from kvpool.spec import AllBlocksCleared, BlockRemoved, BlockStored, Event
from kvpool.spec.manager import (
    FULL_ATTENTION,
    Admit,
    EvictCached,
    ManagerConfig,
    RequestAction,
    Scheduled,
)
from kvpool.spec.manager.extra_keys import NO_EXTRA, partitioned_block_hashes
from kvpool.spec.manager.properties import expected_key

from ...machines.pool.target import PoolView
from ...machines.requests.target import RequestSetup

OBSERVES = frozenset({"ref_cnt", "keys", "index", "structure"})
#: The one attribute a tree key carries beside its tokens (from 0.5 on): the salt.
SALT_ONLY = frozenset({"cache-salt"})


#: The ``page_size`` of a target that names none: page 1 where the drawn hash block size is
#: 1, the drawn page (as ``page=drawn``) where it is larger, so a default run draws
#: token-granular trees and paged ones (whose pages chain in its events) alike.
PAGE_BY_DRAW = 0


def supported_setup(setup: RequestSetup, page_size: int | None = 1) -> RequestSetup:
    """``setup`` as SGLang's cache can take it: one full-attention group, caching on,
    blocks of ``page_size`` tokens keyed per page, the capacity kept in tokens. ``None``
    takes the largest power of two up to the drawn block size (its paged kernels need a
    power of two); :data:`PAGE_BY_DRAW` takes that where the drawn hash block size is more
    than 1, else 1."""
    drawn = setup.manager.block_size
    largest = 1 << (drawn.bit_length() - 1)
    page = largest if page_size is None else page_size
    if page_size == PAGE_BY_DRAW:
        page = largest if setup.pool.hash_block_size > 1 else 1
    tokens = (setup.pool.num_gpu_blocks - 1) * setup.manager.block_size
    pages = max(1, tokens // page)
    pool = replace(setup.pool, enable_caching=True, hash_block_size=page, num_gpu_blocks=pages + 1)
    return RequestSetup(ManagerConfig(page, (FULL_ATTENTION,)), pool)


def event_hash(value: int) -> bytes:
    """SGLang's integer hash as the spec's bytes."""
    return int(value).to_bytes(8, "little", signed=True)


class RequestRecord(Protocol):
    """What the view reads of a request the adapter keeps."""

    #: The request's slots (SGLang's ``req_to_token`` row).
    slots: list[int]
    #: The leading tokens the tree holds for it (its locked prefix).
    tree_len: int
    computed: int
    running: bool


class SglangTreeView:
    """The inspection of the request machine's adapter; it sets ``cache``,
    ``allocator``, ``page``, ``num_pages`` and ``requests`` and says where the free list
    is (:meth:`_free_pages`)."""

    checked_by_properties = True
    observes = OBSERVES

    #: The loaded release (its modules, and from 0.5 on ``active()`` to run inside).
    release: Any
    cache: Any
    allocator: Any
    page: int
    num_pages: int
    requests: dict[str, Any]

    def __init__(self) -> None:
        self._keys: dict[tuple[str | None, tuple[int, ...]], tuple[bytes, ...]] = {}

    def allows(self, action: RequestAction) -> bool:
        """No call evicts named pages (only ``evict(n)``, by LRU): ``evict_cached`` is
        never drawn; nor a salted request (0.4's tree has no salt), nor a request
        with other extra keys (LoRA, multimodal: the suite does not build adapters)."""
        if isinstance(action, EvictCached):
            return False
        if not isinstance(action, Admit):
            return True
        return action.extra == NO_EXTRA and action.salt is None

    def evict_cached(self, block_ids: tuple[int, ...]) -> None:
        raise NotImplementedError("SGLang's RadixCache evicts only by LRU")

    def keyed_tokens(self, request_id: str) -> int:
        """How many leading tokens of the request the tree holds for it (its locked
        prefix): decoded tokens join only when it finishes."""
        return int(self.requests[request_id].tree_len)

    def is_block_writable(self, block: int) -> bool:
        """A page out of the tree and out of the free list, in exactly one running
        request's table (SGLang has no such query: its engine writes every slot it
        allocated)."""
        if block < 1 or block > self.num_pages or block in self._tree_pages():
            return False
        if block in set(self._free_pages()):
            return False
        holders = sum(self._pages(r.slots).count(block) for r in self.requests.values())
        return holders == 1

    def _whole_pages(self, count: int) -> int:
        return count // self.page * self.page

    def _pages(self, slots: list[int]) -> list[int]:
        """The pages of a request's slots, in table order."""
        return [slots[i] // self.page for i in range(0, len(slots), self.page)]

    def _scheduled(self, request: RequestRecord) -> Scheduled:
        return Scheduled(request.computed, (tuple(self._pages(request.slots)),))

    # --- looking inside -------------------------------------------------------------------

    def _free_pages(self) -> list[int]:
        raise NotImplementedError

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

    def _tree_pages(self) -> dict[int, tuple[Any, bytes]]:
        """page -> (node, the spec's key of the prefix ending at the page)."""
        pages: dict[int, tuple[Any, bytes]] = {}
        for node, path in self._nodes():
            keys = self._path_keys(getattr(node.key, "cache_salt", None), path)
            first = (len(path) - len(node.key)) // self.page
            for i, page in enumerate(self._pages([int(s) for s in node.value.tolist()])):
                if first + i < len(keys):
                    pages[page] = (node, keys[first + i])
        return pages

    def _path_keys(self, salt: str | None, path: tuple[int, ...]) -> tuple[bytes, ...]:
        keys = self._keys.get((salt, path))
        if keys is None:
            page = self.page
            hashes = partitioned_block_hashes(path, page, salt, NO_EXTRA, SALT_ONLY)
            keys = tuple(expected_key(hashes, page, page, i, 0) for i in range(len(hashes)))
            self._keys[(salt, path)] = keys
        return keys

    def event_parents(self) -> dict[tuple[int, bytes], bytes | None] | None:
        """The chain a router rebuilds, as the tree holds it (:func:`event_parents`)."""
        if getattr(self.cache, "kv_events", None) is None:
            return None
        with self.release.active():
            return event_parents(self.release.modules, self.cache)

    def view(self) -> PoolView:
        tree = self._tree_pages()
        free = set(self._free_pages())
        ref_cnt = [0]
        keys: list[frozenset[bytes]] = [frozenset()]
        primary: list[bytes | None] = [None]
        for page in range(1, self.num_pages + 1):
            if page in tree:
                node, key = tree[page]
                ref_cnt.append(int(node.lock_ref))
                keys.append(frozenset([key]))
                primary.append(key)
            else:
                ref_cnt.append(0 if page in free else 1)
                keys.append(frozenset())
                primary.append(None)
        index = tuple(sorted((key, (page,)) for page, (_, key) in tree.items()))
        free_tokens = int(self.allocator.available_size()) + int(self.cache.evictable_size())
        return PoolView(
            free_count=free_tokens // self.page,
            ref_cnt=tuple(ref_cnt),
            keys=tuple(keys),
            primary=tuple(primary),
            index=index,
        )

    def structure_problems(self) -> list[str]:
        problems: list[str] = []
        evictable = protected = 0
        tree_pages: list[int] = []
        for node, _ in self._nodes():
            slots = [int(s) for s in node.value.tolist()]
            pages = self._pages(slots)
            whole = [pages[i // self.page] * self.page + i % self.page for i in range(len(slots))]
            if len(slots) % self.page or slots != whole:
                problems.append(
                    f"invariant 'tree-pages-whole': a tree node holds slots {slots}, not "
                    f"whole pages of {self.page}"
                )
            tree_pages += pages
            if node.lock_ref > 0:
                protected += len(slots)
            else:
                evictable += len(slots)
            if node.lock_ref < 0:
                problems.append(
                    f"a tree node holding {len(slots)} slots has lock_ref {node.lock_ref}"
                )
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
        free = self._free_pages()
        if len(free) != len(set(free)):
            problems.append(f"invariant 'free-list-once': the free list repeats a page: {free}")
        if len(tree_pages) != len(set(tree_pages)):
            problems.append("invariant 'tree-page-once': two tree nodes hold the same page")
        both = sorted(set(free) & set(tree_pages))
        if both:
            problems.append(f"invariant 'free-apart-from-tree': pages {both} are free and cached")
        own = [
            p
            for r in self.requests.values()
            if r.running
            for p in self._pages(r.slots)[r.tree_len // self.page :]
        ]
        placed = set(free) | set(tree_pages) | set(own)
        everything = set(range(1, self.num_pages + 1))
        if placed != everything or len(free) + len(tree_pages) + len(own) != len(placed):
            problems.append(
                f"invariant 'pages-accounted': {len(free)} free + {len(tree_pages)} cached + "
                f"{len(own)} requests' own pages, of {self.num_pages}"
            )
        return problems


def page_event_hashes(
    modules: Mapping[str, ModuleType], cache: Any, node: Any
) -> list[bytes] | None:
    """The hash each page of ``node`` is published under, in order, as the release's
    recorder names it (0.5 on: ``cache.kv_events``, its position-aware hashes namespaced
    as it publishes them); ``None`` where the tree has no such recorder (0.4: one hash per
    node, of its own tokens). Run with the release's ``modules`` active."""
    recorder = getattr(cache, "kv_events", None)
    if recorder is None:
        return None
    events = modules["sglang.srt.disaggregation.kv_events"]
    to_int64 = modules["sglang.srt.mem_cache.utils"].hash_str_to_int64
    seed = recorder._namespace_seed(node)
    return [
        event_hash(events.namespaced_block_hash(int(to_int64(value)), namespace_seed=seed))
        for value in recorder._node_event_hash_values(node)
    ]


def event_parents(
    modules: Mapping[str, ModuleType], cache: Any
) -> dict[tuple[int, bytes], bytes | None] | None:
    """The chain a router rebuilds, as ``cache``'s tree holds it: every page the tree
    holds, under the hash its events give it, mapped to the hash of the page before it on
    its path from the root (``None`` for a sequence's first page). ``None`` where the
    pages' hashes cannot be named (:func:`page_event_hashes`). Run with the release's
    ``modules`` active."""
    if getattr(cache, "kv_events", None) is None:
        return None
    parents: dict[tuple[int, bytes], bytes | None] = {}
    stack: list[tuple[Any, bytes | None]] = [(cache.root_node, None)]
    while stack:
        node, before = stack.pop()
        for child in node.children.values():
            last = before
            for h in page_event_hashes(modules, cache, child) or ():
                parents[(0, h)] = last
                last = h
            stack.append((child, last))
    return parents


def spec_events(taken: Iterable[Any], stored: str, removed: str) -> tuple[Event, ...]:
    """A radix cache's events (``take_events``) as the spec's: its store events are of
    type ``stored``, its removals ``removed``, anything else a clear (both generations
    publish vLLM's schema, under their own class names)."""
    events: list[Event] = []
    for event in taken:
        kind = type(event).__name__
        if kind == stored:
            parent = event.parent_block_hash
            events.append(
                BlockStored(
                    tuple(event_hash(h) for h in event.block_hashes),
                    None if parent is None else event_hash(parent),
                    0,
                    int(event.block_size),
                    len(event.token_ids),
                )
            )
        elif kind == removed:
            events.extend(BlockRemoved(event_hash(h), 0) for h in event.block_hashes)
        else:
            events.append(AllBlocksCleared())
    return tuple(events)


def require_native_hash(modules: Mapping[str, ModuleType], label: str) -> None:
    """The release's node hash compiled (or found compiled), else
    :class:`~.loader.SglangUnavailable` naming what it needs: a failure there is the
    machine's, never a finding of SGLang's."""
    from .loader import SglangUnavailable

    native = modules["sglang.srt.mem_cache.cpp_utils.native_hash"]
    try:
        native._load_native_hash_module()
    except RuntimeError as exc:
        raise SglangUnavailable(
            f"{label} hashes its KV events with its own hash_binding.cpp, compiled "
            "on first use by torch's extension builder (it needs a C++ compiler, ninja and "
            f"OpenSSL's headers): {exc.__cause__ or exc}"
        ) from exc
