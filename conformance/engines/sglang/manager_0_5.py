"""SGLang's ``RadixCache`` of the 0.5 API generation, driven as its scheduler drives it.

From 0.5 on the cache is built from a ``CacheInitParams`` and called with params records
(``MatchPrefixParams``, ``InsertParams``, ``EvictParams``); a lock is a ``TreeLock``
receipt of ``inc_lock_ref``, and the scheduler no longer calls the cache's
``cache_unfinished_req`` / ``cache_finished_req`` (gone in 0.5) but the functions of
``mem_cache/common.py`` and ``mem_cache/allocation.py``. The adapter makes exactly those
calls, in the scheduler's order, with one request per batch; every function named below
is the release's own:

=======================  ================================================================
protocol call            SGLang 0.5
=======================  ================================================================
``admit`` / ``resume``   what ``Req.init_next_round_input`` does: ``match_kv_cache`` with
                         the key capped one token short of the request
                         (``max_prefix_len``; the tree cuts it to whole pages), the tree's
                         part taken as ``cache_protected_len``; then, as the prefill
                         adder admits it, ``tree_cache.lock(last_node)`` and
                         ``alloc_for_extend`` (a row of ``ReqToTokenPool``; with page
                         size 1 ``alloc_token_slots``, else ``alloc_paged_token_slots_
                         extend``, each evicting through the allocator's
                         ``evict_to_free_tokens`` first); ``None`` (lock released) when the
                         free and evictable slots cannot hold it
``append(tokens)``       one token after a forward pass: ``alloc_for_decode``; more (or
                         before the first pass): an extend, ``alloc_for_extend`` on the
                         request's own row (a chunked prefill's next chunk)
``commit``               after an extend: ``checkpoint_kv_cache`` (``RadixCache.checkpoint``
                         inserts the computed tokens' whole pages, frees the duplicates,
                         re-matches, moves the lock); after a decode step nothing
``finish``               ``release_kv_cache(req, tree_cache, checkpoint=True)``
``preempt``              ``release_kv_cache(req, tree_cache, checkpoint=False)`` (the
                         retraction's release; its eviction ahead of the next decode
                         steps, a memory heuristic, is not made)
``reset_prefix_cache``   ``Scheduler.flush_cache``: refused (``False``) while any request
                         runs or waits; else ``tree_cache.reset()``, the request pool's
                         and the allocator's ``clear()``
=======================  ================================================================

**The request.** SGLang's ``Req`` is a class of hundreds of fields built from a tokenized
request; the calls above read a few of them. :class:`SglangReq` holds those (the tokens,
``extend_end``, ``prefix_len``, the lock and matched node, the namespaces ``extra_key``
and ``cache_salt``, and ``finished()`` and ``owned_kv_len()`` as a request without
speculative decoding or a stop string answers them) and its ``kv`` is the release's own
``ReqKvInfo`` (read out of ``managers/schedule_batch.py``). The batch is
:class:`SglangBatch`, one request, with the fields the two allocation functions read.

**Pages.** Page size 1 runs ``TokenToKVPoolAllocator``; a page size ``P > 1``
``PagedTokenToKVPoolAllocator``, whose ``alloc_extend`` / ``alloc_decode`` run the
release's torch paths (``alloc_extend_naive``, ``alloc_decode_naive``: what SGLang runs
where triton is not supported), so nothing of the allocation is emulated.

**Salts.** A request's salt is its ``cache_salt``: the tree keys its nodes by it
(``RadixKey.child_key``), so requests of different salts never share a node.

**Events.** With ``enable_kv_cache_events`` the release's ``KVCacheEventRecorder`` queues
one ``BlockStored`` per page (coalesced into one event per chain), hashed by the
release's own position-aware hash (``hash_binding.cpp``, compiled on first use), parent
``None`` under the root, a ``BlockRemoved`` per node evicted and ``AllBlocksCleared`` at
every reset. ``take_events`` gives them as the spec's events and ``event_residency`` what
the tree holds in the same terms: each node's pages under the hashes the recorder gives
them.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial, wraps
from typing import Any, TypeVar

from kvpool.spec import Event
from kvpool.spec.manager import Scheduled

from ...machines.requests.target import RequestSetup
from ...targets.manager_factory import ReleaseManagerFactory
from .release_0_5 import SglangRelease05
from .tree_view import SglangTreeView, require_native_hash, spec_events, supported_setup

#: ``ReqToTokenPool``'s rows (requests at once) and columns (tokens of one request): far
#: above what the request machine draws.
MAX_REQUESTS, MAX_CONTEXT = 128, 1024

Result = TypeVar("Result")


def _in_release(method: Callable[..., Result]) -> Callable[..., Result]:
    """Run ``method`` with the release's modules importable (see
    :meth:`SglangRelease05.active`)."""

    @wraps(method)
    def run(self: SglangManagerTarget05, *args: Any, **kwargs: Any) -> Result:
        with self.release.active():
            return method(self, *args, **kwargs)

    return run


@dataclass
class SglangReq:
    """The fields of SGLang's ``Req`` that the scheduler's cache and allocation calls read
    and write, nothing else."""

    rid: str
    origin_input_ids: array[int]
    kv: Any
    output_ids: array[int] = field(default_factory=lambda: array("q"))
    full_untruncated_fill_ids: array[int] = field(default_factory=lambda: array("q"))
    cache_salt: str | None = None
    extra_key: str | None = None
    priority: int | None = None
    extend_end: int = 0
    prefix_len: int = 0
    lock: Any = None
    last_node: Any = None
    last_host_node: Any = None
    best_match_node: Any = None
    host_hit_length: int = 0
    swa_host_hit_length: int = 0
    mamba_host_hit_length: int = 0
    num_matched_prefix_tokens: int = 0
    swa_branching_seqlen: int | None = None
    mamba_branching_seqlen: int | None = None
    skip_radix_cache_insert: bool = False
    finished_reason: str | None = None
    #: ``None``: no stop string cut the output (``owned_kv_len`` is the committed KV).
    finished_len: int | None = None

    def finished(self) -> bool:
        return self.finished_reason is not None

    def refresh_fill_ids(self) -> None:
        """The fill ids are the prompt and the output, as SGLang keeps them."""
        self.full_untruncated_fill_ids = self.origin_input_ids + self.output_ids

    def owned_kv_len(self) -> int:
        """The KV the request owns: all it committed (no reasoning strip, no stop cut)."""
        return int(self.kv.kv_committed_len)

    def _compute_max_prefix_len(self, input_len: int) -> int:
        """At most all tokens but the last (no logprobs asked, not a diffusion model)."""
        return max(input_len - 1, 0)


@dataclass
class _ModelConfig:
    is_encoder_decoder: bool = False


@dataclass
class SglangBatch:
    """A ``ScheduleBatch`` of one request, with the fields ``alloc_for_extend`` and
    ``alloc_for_decode`` read."""

    reqs: list[SglangReq]
    tree_cache: Any
    req_to_token_pool: Any
    seq_lens: Any
    seq_lens_cpu: Any
    prefix_lens: list[int] = field(default_factory=list)
    extend_lens: list[int] = field(default_factory=list)
    extend_num_tokens: int = 0
    req_pool_indices: Any = None
    req_pool_indices_cpu: Any = None
    device: str = "cpu"
    hisparse_coordinator: None = None
    model_config: _ModelConfig = field(default_factory=_ModelConfig)

    def is_dllm(self) -> bool:
        return False

    def maybe_evict_swa(self) -> None:
        """The tree has no sliding-window part (``supports_swa()`` is false)."""


@dataclass
class _Request:
    tokens: list[int]
    req: SglangReq
    #: The request's slots (its ``req_to_token`` row while it holds one).
    slots: list[int] = field(default_factory=list)
    #: The leading tokens the tree holds for it (its locked prefix).
    tree_len: int = 0
    computed: int = 0
    running: bool = True
    #: The last allocation was an extend: the next forward pass is checkpointed.
    extending: bool = True


class SglangManagerTarget05(SglangTreeView):
    """One ``RadixCache`` of the 0.5 generation and its allocator behind the
    manager-target protocol."""

    takes_salts = True
    #: ``checkpoint`` points a request at the tree's page where another request cached the
    #: same prefix first (and frees its own copy): a by-design table change.
    swaps_in_cached = True
    #: ``flush_cache`` refuses while a request waits (a preempted one too).
    resets_only_without_requests = True

    def __init__(self, release: SglangRelease05, setup: RequestSetup, name: str) -> None:
        import torch

        super().__init__()
        self.torch = torch
        self.release = release
        self.name = name
        self.version = release.label
        self.setup = setup
        self.page = setup.manager.block_size
        self.num_pages = setup.pool.num_gpu_blocks - 1
        self.publishes_events = setup.pool.enable_kv_cache_events
        self.requests: dict[str, _Request] = {}
        with release.active():
            self._build()

    def _build(self) -> None:
        torch, release, size = self.torch, self.release, self.num_pages * self.page
        allocators = release.allocator
        self.allocator: Any
        if self.page == 1:
            token_class = allocators.TokenToKVPoolAllocator
            self.allocator = token_class(size, torch.float16, "cpu", None, False)
        else:
            self.allocator = allocators.PagedTokenToKVPoolAllocator(
                size, self.page, torch.float16, "cpu", None, False
            )
        self.req_pool: Any = release.req_to_token_pool(MAX_REQUESTS, MAX_CONTEXT, "cpu", False)
        params = release.cache_init_params.CacheInitParams(
            disable=False,
            req_to_token_pool=self.req_pool,
            token_to_kv_pool_allocator=self.allocator,
            page_size=self.page,
            enable_kv_cache_events=self.publishes_events,
        )
        self.cache: Any = release.radix_cache.RadixCache(params)
        if self.publishes_events:
            require_native_hash(release.modules, release.label)

    # --- SGLang's calls -------------------------------------------------------------------

    def _lengths(self, *values: int) -> Any:
        return self.torch.tensor(list(values), dtype=self.torch.int64)

    def _batch(self, request: _Request, prefix: int, seq: int) -> SglangBatch:
        idx = request.req.kv.req_pool_idx
        return SglangBatch(
            reqs=[request.req],
            tree_cache=self.cache,
            req_to_token_pool=self.req_pool,
            seq_lens=self._lengths(seq),
            seq_lens_cpu=self._lengths(seq),
            prefix_lens=[prefix],
            extend_lens=[seq - prefix],
            extend_num_tokens=seq - prefix,
            req_pool_indices=None if idx is None else self._lengths(idx),
            req_pool_indices_cpu=None if idx is None else self._lengths(idx),
        )

    def _fits(self, have: int, more: int) -> bool:
        """Whether ``more`` tokens after ``have`` fit in the free and evictable slots (the
        prefill adder's and the decode check's budget), counted in whole new pages."""
        new_pages = -(-(have + more) // self.page) - -(-have // self.page)
        room = int(self.allocator.available_size()) + int(self.cache.evictable_size())
        return new_pages * self.page <= room

    def _read_row(self, request: _Request) -> None:
        idx, length = request.req.kv.req_pool_idx, request.req.kv.kv_allocated_len
        row = self.req_pool.req_to_token[idx, :length]
        request.slots = [int(s) for s in row.tolist()]

    def _schedule(self, request: _Request) -> Scheduled | None:
        req, common = request.req, self.release.common
        req.refresh_fill_ids()
        fill = req.full_untruncated_fill_ids
        result = common.match_kv_cache(
            req, self.cache, fill, max_prefix_len=req._compute_max_prefix_len(len(fill))
        )
        if result.cache_protected_len is None:
            req.kv.cache_protected_len = req.prefix_len
        req.lock = self.cache.lock(req.last_node)
        if not self._fits(req.prefix_len, len(fill) - req.prefix_len):
            self.cache.unlock(req.lock)
            req.lock = None
            return None
        req.extend_end = len(fill)
        self.release.allocation.alloc_for_extend(self._batch(request, req.prefix_len, len(fill)))
        self._read_row(request)
        request.tree_len = request.computed = req.prefix_len
        request.running, request.extending = True, True
        return self._scheduled(request)

    # --- the protocol ---------------------------------------------------------------------

    @_in_release
    def admit(self, request_id: str, tokens: tuple[int, ...], salt: str | None) -> Scheduled | None:
        kv = self.release.req_kv_info()
        req = SglangReq(request_id, array("q", tokens), kv, cache_salt=salt)
        request = _Request(list(tokens), req)
        result = self._schedule(request)
        if result is not None:
            self.requests[request_id] = request
        return result

    @_in_release
    def resume(self, request_id: str) -> Scheduled | None:
        request = self.requests[request_id]
        request.req.kv = self.release.req_kv_info()
        return self._schedule(request)

    @_in_release
    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        request = self.requests[request_id]
        req, allocation = request.req, self.release.allocation
        have = int(req.kv.kv_allocated_len)
        if not self._fits(have, len(tokens)):
            return None
        decode = len(tokens) == 1 and not request.extending
        req.output_ids.extend(tokens)
        req.refresh_fill_ids()
        if decode:
            allocation.alloc_for_decode(self._batch(request, have, have), 1)
        else:
            req.prefix_len, req.extend_end = have, have + len(tokens)
            allocation.alloc_for_extend(self._batch(request, have, have + len(tokens)))
        request.extending = not decode
        request.tokens += tokens
        self._read_row(request)
        return self._scheduled(request)

    def prepare_write(self, request_id: str) -> Scheduled | None:
        return self._scheduled(self.requests[request_id])

    def copies_done(self, request_id: str) -> None:
        return None

    @_in_release
    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        """``checkpoint_kv_cache`` after an extend; nothing after a decode step."""
        request = self.requests[request_id]
        request.computed = len(request.tokens)
        if request.extending:
            request.extending = False
            self.release.common.checkpoint_kv_cache(request.req, self.cache)
            self._read_row(request)
            request.tree_len = int(request.req.kv.cache_protected_len)
        return self._scheduled(request)

    @_in_release
    def preempt(self, request_id: str) -> None:
        """The retraction's ``release_kv_cache(checkpoint=False)``."""
        request = self.requests[request_id]
        self.release.common.release_kv_cache(request.req, self.cache, checkpoint=False)
        request.slots, request.tree_len, request.computed = [], 0, 0
        request.running, request.extending = False, True

    @_in_release
    def finish(self, request_id: str) -> None:
        """``release_kv_cache(checkpoint=True)`` on the finished request; a request with
        nothing computed is released as an aborted one (``checkpoint=False``): none of its
        KV was written."""
        request = self.requests.pop(request_id)
        if not request.running:
            return
        request.req.finished_reason = "length"
        written = request.computed > 0
        if written:
            self._drop_uncomputed(request)
        self.release.common.release_kv_cache(request.req, self.cache, checkpoint=written)

    def _drop_uncomputed(self, request: _Request) -> None:
        """Slots allocated for tokens no forward pass computed (the protocol may finish a
        request between an ``append`` and its pass; SGLang's scheduler never does): the
        pages past the computed tokens' last one are freed and the KV committed cut back
        to the computed tokens, so the release caches only KV that was written."""
        kv, computed = request.req.kv, request.computed
        start = -(-computed // self.page) * self.page
        if start < kv.kv_allocated_len:
            row = self.req_pool.req_to_token[kv.req_pool_idx, start : kv.kv_allocated_len]
            self.allocator.free(row.to(self.torch.int64))
        kv.kv_allocated_len = kv.kv_committed_len = computed

    @_in_release
    def reset_prefix_cache(self) -> bool:
        """``Scheduler.flush_cache``: only with no request running or waiting."""
        if self.requests:
            return False
        self.cache.reset()
        self.req_pool.clear()
        self.allocator.clear()
        return True

    # --- events ---------------------------------------------------------------------------

    @_in_release
    def take_events(self) -> tuple[Event, ...]:
        """The recorder's events since the last call, as the spec's events."""
        return spec_events(self.cache.take_events(), "BlockStored", "BlockRemoved")

    @_in_release
    def event_residency(self) -> dict[tuple[int, bytes], int]:
        """What the tree holds in its events' terms: every page of every node under the
        hash the release's recorder publishes for it."""
        held = Counter[tuple[int, bytes]]()
        for node, _ in self._nodes():
            held.update((0, h) for h in self.page_event_hashes(node) or ())
        return dict(held)

    # --- looking inside -------------------------------------------------------------------

    def _free_pages(self) -> list[int]:
        """The allocator's free list (``free_pages``: slots with page size 1, pages else;
        built without ``need_sort``, so nothing waits in a release list)."""
        return [int(p) for p in self.allocator.free_pages.tolist()]


SglangManagerFactory05 = ReleaseManagerFactory[SglangRelease05, SglangManagerTarget05]


def sglang_managers_0_5(
    release: SglangRelease05, name: str, page_size: int | None
) -> SglangManagerFactory05:
    """Managers from ``release`` with pages of ``page_size`` tokens (``None``: the drawn
    block size)."""
    narrow = partial(supported_setup, page_size=page_size)
    return ReleaseManagerFactory(release, name, SglangManagerTarget05, narrow)
