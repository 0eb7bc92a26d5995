"""SGLang's ``RadixCache`` over its token allocator, driven as a KV cache manager.

SGLang caches KV per token slot; the allocator hands slots out a page at a time. With page
size 1 (SGLang's default) it is ``TokenToKVPoolAllocator`` (free slots ``1..size`` in a
torch tensor, slot 0 kept for padding); with page size ``P > 1`` it is
``PagedTokenToKVPoolAllocator`` (free pages ``1..size/P``, page ``p`` holding slots
``p*P .. p*P+P-1``), and the radix tree then matches, splits and inserts whole pages only:
a hit is cut down to a page boundary. Its scheduler (0.4.6) drives the two as below; the
adapter makes the same calls in the same order (the scheduler itself is not loaded), and
the cache's own ``cache_unfinished_req`` and ``cache_finished_req`` run as the release
ships them, given a small ``Req`` (:class:`SglangReq`: the six fields they read) whose
``req_to_token`` row is in the release's own ``ReqToTokenPool``:

=======================  ================================================================
protocol call            SGLang
=======================  ================================================================
``admit`` / ``resume``   ``match_prefix`` on all tokens but the last (one is always
                         computed; the tree cuts the key to whole pages), ``inc_lock_ref``
                         on the node reached, the rest allocated as a prefill extends
                         (``evict`` first when the free list is short); ``None`` (lock
                         dropped) when short
``append(tokens)``       one token: a decode step's allocation; more: an extend's
``commit``               after a prefill (the first forward pass since admission or
                         resumption) ``cache_unfinished_req``: ``insert`` the computed
                         tokens' whole pages, free the request's pages the tree already
                         had, re-match and move the lock; after a decode step nothing:
                         decoded tokens are cached when the request finishes
``finish``               ``cache_finished_req``: the pages past the last whole one freed,
                         the rest inserted, duplicates freed, ``dec_lock_ref``
``preempt``              ``retract_decode``: the pages past the cached prefix freed,
                         ``dec_lock_ref``
``reset_prefix_cache``   ``Scheduler.flush_cache``: refused (``False``) while any request
                         runs or waits; else ``RadixCache.reset`` and the allocator's
                         ``clear``
=======================  ================================================================

**Allocation.** With page size 1 the scheduler calls ``alloc(n)`` (``evict(n)`` first when
fewer than ``n`` slots are free). With pages it calls ``alloc_extend`` / ``alloc_decode``,
triton kernels that need a GPU: the adapter makes the kernels' one-request result from
the allocator's own ``alloc`` instead. A request's next tokens first fill its last page
(the slots after its last one), then take whole new pages from the head of the free list,
exactly as many as the kernel counts (``free_pages[:n]``, which ``alloc(n * P)`` takes);
the eviction before it asks for what the scheduler asks: ``need + P`` tokens for an
extend, ``P`` for a decode step, when fewer are free.

**Blocks are pages.** The request machine runs it with ``block_size = hash_block_size =``
the page size: a page is a block, a request's table is its pages in order, and the key of
a tree page is the spec's key of the prefix ending at that page. The page size is the
target's (``,page=N``, a power of two; 1 by default) or the largest power of two up to
the drawn block size (``,page=drawn``). ``tests/conformance/test_sglang_paged_kernels.py``
runs the kernels in triton's interpreter beside this allocation.

**What it shows** is :mod:`.tree_view`'s, shared with the 0.5 generation.

**Events.** Built with ``enable_kv_cache_events`` when the setup asks for events: the tree
publishes one ``BlockStored`` per node stored (its hash ``hash(tuple(node.key))``, the
parent's likewise), a ``BlockRemoved`` per node that leaves (a split removes the node and
stores its two halves), ``AllBlocksCleared`` on every reset. ``take_events`` gives them as
the spec's events (hashes as 8-byte signed integers, group 0) and ``event_residency`` what
the tree holds in the same terms, for the consumer models of the events level.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kvpool.spec import Event
from kvpool.spec.manager import Scheduled

from ...machines.requests.target import RequestSetup
from ...targets.manager_factory import ReleaseManagerFactory
from .release import SglangRelease
from .tree_view import SglangTreeView, event_hash, spec_events, supported_setup

#: ``ReqToTokenPool``'s rows (requests at once) and columns (tokens of one request): far
#: above what the request machine draws.
MAX_REQUESTS, MAX_CONTEXT = 128, 1024
#: The output token sampled after the last forward pass: in ``output_ids`` but without KV
#: (``cache_finished_req`` caches all tokens but the last).
SAMPLED = -1


@dataclass
class SglangReq:
    """The fields of SGLang's ``Req`` that ``cache_unfinished_req`` and
    ``cache_finished_req`` read and write, nothing else."""

    origin_input_ids: list[int]
    output_ids: list[int]
    fill_ids: list[int]
    req_pool_idx: int
    prefix_indices: Any
    last_node: Any


@dataclass
class _Request:
    tokens: list[int]
    #: The request's slots (SGLang's ``req_to_token`` row).
    slots: list[int] = field(default_factory=list)
    #: ``len(req.prefix_indices)``: with pages, the tree's part and the request's own
    #: slots of its last, partial page computed by a prefill.
    prefix_len: int = 0
    #: The leading tokens the tree holds for it (its locked prefix).
    tree_len: int = 0
    last_node: Any = None
    #: Its row of SGLang's ``ReqToTokenPool`` while it is scheduled.
    req_pool_idx: int | None = None
    computed: int = 0
    running: bool = True
    #: No forward pass since admission or resumption: the next one is a prefill.
    prefilling: bool = True


class SglangManagerTarget(SglangTreeView):
    """One ``RadixCache`` and its allocator behind the manager-target protocol."""

    #: ``cache_unfinished_req`` points a request at the tree's page where another request
    #: cached the same prefix first (and frees its own copy): a by-design table change.
    swaps_in_cached = True
    #: ``flush_cache`` refuses while a request waits (a preempted one too), not only while
    #: a block is held.
    resets_only_without_requests = True

    def __init__(self, release: SglangRelease, setup: RequestSetup, name: str) -> None:
        import torch

        super().__init__()
        self.torch = torch
        self.name = name
        self.version = release.label
        self.setup = setup
        self.page = setup.manager.block_size
        self.num_pages = setup.pool.num_gpu_blocks - 1
        size = self.num_pages * self.page
        self.allocator: Any
        if self.page == 1:
            allocator_class = release.memory_pool.TokenToKVPoolAllocator
            self.allocator = allocator_class(size, torch.float16, "cpu", None)
        else:
            paged_class = release.paged_allocator.PagedTokenToKVPoolAllocator
            self.allocator = paged_class(size, self.page, torch.float16, "cpu", None)
        self.publishes_events = setup.pool.enable_kv_cache_events
        self.req_pool: Any = release.memory_pool.ReqToTokenPool(
            MAX_REQUESTS, MAX_CONTEXT, "cpu", False
        )
        self.cache: Any = release.radix_cache.RadixCache(
            self.req_pool,
            self.allocator,
            page_size=self.page,
            enable_kv_cache_events=self.publishes_events,
        )
        self.requests: dict[str, _Request] = {}

    # --- SGLang's calls -------------------------------------------------------------------

    def _tensor(self, slots: list[int]) -> Any:
        return self.torch.tensor(slots, dtype=self.torch.int64)

    def _free(self, slots: list[int]) -> None:
        if slots:
            self.allocator.free(self._tensor(slots))

    def _grow(self, slots: list[int], n: int, decode: bool) -> list[int] | None:
        """Slots for ``n`` more tokens after ``slots`` (``None``: too few free), as the
        scheduler allocates them: ``alloc_token_slots`` with page size 1, else the
        paged extend or decode (see the module docstring)."""
        if n == 0:
            return []
        page = self.page
        reserve = n if page == 1 else page if decode else n + page
        if self.allocator.available_size() < reserve:
            self.cache.evict(reserve)
        if page == 1:
            got = self.allocator.alloc(n)
            return None if got is None else [int(s) for s in got.tolist()]
        before, after = len(slots), len(slots) + n
        new_pages = -(-after // page) - -(-before // page)
        if new_pages > len(self.allocator.free_pages):
            return None
        fill = min(after, -(-before // page) * page) - before
        filled = [slots[-1] + 1 + i for i in range(fill)]
        fresh = self.allocator.alloc(new_pages * page) if new_pages else self._tensor([])
        return filled + [int(s) for s in fresh.tolist()][: n - fill]

    def _schedule(self, request: _Request) -> Scheduled | None:
        key = request.tokens[: len(request.tokens) - 1]
        prefix, node = self.cache.match_prefix(key=list(key))
        self.cache.inc_lock_ref(node)
        hit = [int(s) for s in prefix.tolist()]
        rest = self._grow(hit, len(request.tokens) - len(hit), decode=False)
        if rest is None:
            self.cache.dec_lock_ref(node)
            return None
        (request.req_pool_idx,) = self.req_pool.alloc(1)
        request.slots, request.last_node = hit + rest, node
        request.prefix_len = request.tree_len = request.computed = len(hit)
        request.running, request.prefilling = True, True
        return self._scheduled(request)

    def _whole_pages(self, count: int) -> int:
        return count // self.page * self.page

    def _req(self, request: _Request, computed: list[int], sampled: list[int]) -> SglangReq:
        """The ``Req`` SGLang's cache calls read, its ``req_to_token`` row written with the
        request's slots: ``computed`` the tokens whose KV is written, ``sampled`` the
        output token sampled after them (no KV: the protocol's next ``append``)."""
        idx = request.req_pool_idx
        assert idx is not None and len(request.slots) <= MAX_CONTEXT
        self.req_pool.write((idx, slice(0, len(request.slots))), self._tensor(request.slots))
        return SglangReq(
            origin_input_ids=list(computed),
            output_ids=list(sampled),
            fill_ids=list(computed),
            req_pool_idx=idx,
            prefix_indices=self._tensor(request.slots[: request.prefix_len]),
            last_node=request.last_node,
        )

    # --- the protocol ---------------------------------------------------------------------

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
        decode = len(tokens) == 1 and not request.prefilling
        more = self._grow(request.slots, len(tokens), decode)
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
        """The release's ``cache_unfinished_req`` after a prefill; nothing after a decode
        step."""
        request = self.requests[request_id]
        request.computed = len(request.tokens)
        if not request.prefilling:
            return self._scheduled(request)
        request.prefilling = False
        req = self._req(request, request.tokens[: request.computed], [])
        self.cache.cache_unfinished_req(req)
        row = self.req_pool.req_to_token[req.req_pool_idx, : len(request.slots)]
        request.slots = [int(s) for s in row.tolist()]
        # the tree now holds the computed tokens' whole pages, all matched again
        request.tree_len, request.last_node = self._whole_pages(request.computed), req.last_node
        request.prefix_len = len(req.prefix_indices)
        return self._scheduled(request)

    def preempt(self, request_id: str) -> None:
        """``retract_decode``: the slots from the last whole page of ``prefix_indices``."""
        request = self.requests[request_id]
        self._free(request.slots[self._whole_pages(request.prefix_len) :])
        self.cache.dec_lock_ref(request.last_node)
        self.req_pool.free(request.req_pool_idx)
        request.slots, request.last_node, request.req_pool_idx = [], None, None
        request.prefix_len = request.tree_len = request.computed = 0
        request.running = False

    def finish(self, request_id: str) -> None:
        """The release's ``cache_finished_req``: the slots past the computed tokens' last
        whole page freed, the rest inserted, duplicates freed, the lock dropped."""
        request = self.requests.pop(request_id)
        if not request.running:
            return
        # the pages after the computed tokens' last one hold no KV: freed first (that
        # last page itself, partly computed, is freed by cache_finished_req)
        self._free(request.slots[-(-request.computed // self.page) * self.page :])
        del request.slots[request.computed :]
        req = self._req(request, request.tokens[: request.computed], [SAMPLED])
        self.cache.cache_finished_req(req)

    def reset_prefix_cache(self) -> bool:
        """``Scheduler.flush_cache``: only with no request running or waiting."""
        if self.requests:
            return False
        self.cache.reset()
        self.allocator.clear()
        return True

    def take_events(self) -> tuple[Event, ...]:
        """The tree's events since the last call, as the spec's events."""
        return spec_events(self.cache.take_events(), "StoredEvent", "RemovedEvent")

    def event_residency(self) -> dict[tuple[int, bytes], int]:
        """What the tree holds in its events' terms: each node's hash, with multiplicity."""
        held = Counter((0, event_hash(hash(tuple(node.key)))) for node, _ in self._nodes())
        return dict(held)

    # --- looking inside -------------------------------------------------------------------

    def _free_pages(self) -> list[int]:
        free = self.allocator.free_slots if self.page == 1 else self.allocator.free_pages
        return [int(p) for p in free.tolist()]


SglangManagerFactory = ReleaseManagerFactory[SglangRelease, SglangManagerTarget]


def sglang_managers(
    release: SglangRelease, name: str, page_size: int | None
) -> SglangManagerFactory:
    """Managers from ``release`` with pages of ``page_size`` tokens (``None``: the drawn
    block size)."""
    narrow = partial(supported_setup, page_size=page_size)
    return ReleaseManagerFactory(release, name, SglangManagerTarget, narrow)
