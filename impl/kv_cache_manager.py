"""The KV cache manager: the scheduler's side of the pool, one block table per KV-cache group.

A request holds, per KV-cache group, a block table (its blocks in token order; the null
block where a sliding window no longer reads) and the manager remembers how many of its
tokens have KV in those blocks (``num_computed_tokens``) and how many leading full blocks
it has registered in the prefix cache (``num_cached_blocks``). Every pool operation the
manager makes is in the order the reference model makes it, so the free queue evolves
identically; only read-only calls (lookups, free counts, writability checks) may be made a
different number of times.

The engine's side is split out of the two operations that need data copies:

* scheduling (``admit``/``resume``) may find a partial prefix-cache entry; the request gets
  a private copy as the first new block of each group. The sources stay held until the
  engine says the copies are made (``copies_done``), then they are released.
* one forward pass is ``prepare_write`` (copy-on-write for a registered tail the request is
  about to write), ``copies_done`` (the copied data now carries the tail's cache keys, and
  the copies are released to the cache), the engine's writes, then ``commit`` (register
  what became cacheable, drop blocks that left a sliding window).

Between a call that returns copies and ``copies_done`` the request accepts no other action
but ``preempt`` and ``finish`` (rule ``copies-pending``): anything else would reorder the
pool's operations against the reference model.
"""

from __future__ import annotations

import hashlib
import pickle
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import compress, islice
from operator import attrgetter, countOf, is_not, not_

from .block import KVCacheBlock
from .block_pool import BlockPool
from .hashing import (
    HashFunction,
    LoraKey,
    MultiModalKey,
    generate_block_hash_extra_keys,
    hash_block_tokens,
    hash_token_blocks,
    sha256_hash,
)
from .release_hashing import ReleaseHashing, pickle_sha256
from .request import Request

#: Table entries, per group, as block ids (0 is the null block).
BlockIds = tuple[tuple[int, ...], ...]
#: ``(src, dst)`` block id pairs the engine must copy before writing.
Copies = tuple[tuple[int, int], ...]


class KVCacheManagerError(ValueError):
    """A refused request-level call; nothing was changed.

    ``rule`` is one of ``request-new``, ``request-tokens``, ``request-running``,
    ``request-preempted``, ``request-known``, ``partial-full-attention`` (the reference
    model's request rules) or ``copies-pending`` (this manager's split copy protocol).
    """

    operation: str
    rule: str
    request_id: str
    detail: str

    def __init__(self, operation: str, rule: str, request_id: str, detail: str) -> None:
        self.operation = operation
        self.rule = rule
        self.request_id = request_id
        self.detail = detail
        super().__init__(f"{operation}: request {request_id!r}: rule '{rule}': {detail}")

    def __reduce__(self) -> tuple[type[KVCacheManagerError], tuple[str, str, str, str]]:
        # Picklable, like the pool's error (fuzzing runs cross process boundaries).
        return (type(self), (self.operation, self.rule, self.request_id, self.detail))


@dataclass(frozen=True, slots=True)
class KVCacheGroupSpec:
    """One KV-cache group: full attention (the defaults) or a sliding window of
    ``sliding_window_blocks * block_size + sliding_window_rest`` tokens (at least 2): the
    token written reads itself and the ``window - 1`` tokens before it."""

    sliding_window_blocks: int = 0
    #: Tokens of the window past its whole blocks.
    sliding_window_rest: int = 1

    def __post_init__(self) -> None:
        w = self.sliding_window_blocks
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"sliding_window_blocks must be an int >= 0, got {w!r}")
        r = self.sliding_window_rest
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(f"sliding_window_rest must be an int >= 0, got {r!r}")

    def window_tokens(self, block_size: int) -> int:
        """The window in tokens over blocks of ``block_size`` (0 for full attention)."""
        if not self.is_sliding:
            return 0
        return self.sliding_window_blocks * block_size + self.sliding_window_rest

    @property
    def is_sliding(self) -> bool:
        return self.sliding_window_blocks > 0 or self.sliding_window_rest > 1

    @classmethod
    def full_attention(cls) -> KVCacheGroupSpec:
        return cls(0)

    @classmethod
    def sliding_window(cls, blocks: int) -> KVCacheGroupSpec:
        """A sliding-window group; ``blocks`` must be positive."""
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
            raise ValueError(f"a sliding window needs at least one block, got {blocks!r}")
        return cls(blocks)


FULL_ATTENTION = KVCacheGroupSpec()


@dataclass(frozen=True, slots=True)
class Scheduled:
    """The manager's answer when it schedules, grows or computes a request.

    ``block_ids`` are the request's tables (one per group, 0 = null block) after the call;
    ``copies`` the ``(src, dst)`` block copies the engine must make before writing.
    """

    num_computed_tokens: int
    block_ids: BlockIds
    copies: Copies = ()


@dataclass(slots=True)
class PrefixHit:
    """A cached prefix found by :meth:`KVCacheManager._find_cached_prefix`.

    ``blocks`` holds, per group, the ``num_blocks`` hit blocks (the null block where a
    sliding window does not need the block); ``partial`` one partial entry per group for
    the block after them (or nothing), covering ``partial_tokens`` more tokens.
    """

    num_blocks: int
    blocks: list[list[KVCacheBlock]]
    partial: list[KVCacheBlock]
    partial_tokens: int


class ManagedRequest:
    """One request as its manager keeps it (mutable, owned by the manager).

    ``request`` carries the tokens and their chained hashes at the pool's
    ``hash_block_size`` (kept covering every token while caching is on), which is what the
    pool reads. ``blocks`` and ``block_ids`` are the same tables, as blocks (for pool calls)
    and as ids (for cheap answers). ``num_nulled[g]``: the first entries of group ``g``'s
    table known to be the null block, so sliding only looks at what is new.
    """

    __slots__ = (
        "block_ids",
        "block_keys",
        "blocks",
        "copies",
        "lora",
        "mm_features",
        "num_cached_blocks",
        "num_computed_tokens",
        "num_nulled",
        "pending_moves",
        "pending_release",
        "prompt_embeds",
        "report_mode",
        "request",
        "running",
        "salt",
        "shown",
        "uniform_keys",
    )

    def __init__(
        self,
        request: Request,
        salt: str | None,
        num_groups: int,
        lora: LoraKey | None = None,
        mm_features: Sequence[MultiModalKey] = (),
        prompt_embeds: Sequence[int] | None = None,
        report_mode: str = "incremental",
    ) -> None:
        self.request = request
        #: ``"full"``: its prefix-cache hits are published again at every lookup.
        self.report_mode = report_mode
        # what the block hashes carry beyond the tokens (see _extra_keys)
        self.salt = salt
        self.lora = lora
        self.mm_features = tuple(mm_features)
        self.prompt_embeds = None if prompt_embeds is None else tuple(prompt_embeds)
        # Without multimodal features or embeddings every block has the same extra keys
        # (the salt and the LoRA adapter): they are asked once per request, not per block.
        self.uniform_keys = not self.mm_features and self.prompt_embeds is None
        #: Those keys, once asked (``_NOT_ASKED`` before).
        self.block_keys: tuple[object, ...] | object | None = _NOT_ASKED
        self.running = False
        self.blocks: list[list[KVCacheBlock]] = [[] for _ in range(num_groups)]
        self.block_ids: list[list[int]] = [[] for _ in range(num_groups)]
        #: ``tables()`` as last made, or ``None`` once ``block_ids`` changed.
        self.shown: BlockIds | None = None
        self.num_computed_tokens = 0
        self.num_cached_blocks = [0] * num_groups
        self.num_nulled = [0] * num_groups
        # The copy protocol: keys to move and blocks to release at ``copies_done``.
        self.pending_moves: list[tuple[KVCacheBlock, KVCacheBlock]] = []
        self.pending_release: list[KVCacheBlock] = []
        # Copies made by ``prepare_write``, reported again by ``commit``.
        self.copies: Copies = ()

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def has_pending_copies(self) -> bool:
        return bool(self.pending_moves or self.pending_release)

    def tables(self) -> BlockIds:
        """``block_ids`` as tuples, made again only after the tables changed (every
        change of ``block_ids`` sets ``shown`` to ``None``)."""
        shown = self.shown
        if shown is None:
            shown = self.shown = tuple([tuple(ids) for ids in self.block_ids])
        return shown


#: A request's report modes: its own stores only, or its hits published again too.
_REPORT_MODES = ("incremental", "full")

#: The blocks a new request's first lookup hashes; each further run is twice as long.
_FIRST_HASHED_RUN = 16
#: A request's uniform extra keys before they are first asked for.
_NOT_ASKED = object()

_sha256 = hashlib.sha256
_dumps = pickle.dumps
_PROTOCOL = pickle.HIGHEST_PROTOCOL

#: Block reads run from C by ``map`` and ``filter``.
_block_id = attrgetter("block_id")
_ref_cnt = attrgetter("ref_cnt")


def _non_negative(ints: Sequence[int]) -> bool:
    """Whether every int is >= 0 (an unsigned array refuses a negative one, in C)."""
    try:
        array("Q", ints)
    except OverflowError:  # a negative int, or one of 64 bits or more: compare them
        return min(ints) >= 0
    return True


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Schedules requests over its own :class:`BlockPool` (``self.block_pool``).

    Every public method checks the caller's contract first and raises
    :class:`KVCacheManagerError` (nothing changed) when it is broken. A scheduling call
    that finds too little room returns ``None``, also with nothing changed.
    """

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        groups: Sequence[KVCacheGroupSpec] = (FULL_ATTENTION,),
        enable_caching: bool = True,
        hash_block_size: int = 1,
        enable_kv_cache_events: bool = True,
        hash_function: HashFunction = sha256_hash,
        hashing: ReleaseHashing | None = None,
    ) -> None:
        """Pre: ``block_size`` is a positive multiple of ``hash_block_size``; at least one
        group. The pool is built with ``num_gpu_blocks`` blocks (block 0 the null block).
        ``hash_function`` digests each block's hash input (parent hash, tokens, extra
        keys); the default is the spec's, and another one gives keys the spec's manager
        does not know (a benchmark hands in digests computed beforehand, say).
        ``hashing`` (:func:`~.release_hashing.vllm_hashing`) hashes blocks as a vLLM
        release does, byte for byte: its extra keys, its ``NONE_HASH`` and (unless
        ``hash_function`` is given) its digest."""
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        if (
            isinstance(hash_block_size, bool)
            or not isinstance(hash_block_size, int)
            or hash_block_size < 1
        ):
            raise ValueError(f"hash_block_size must be a positive int, got {hash_block_size!r}")
        if block_size % hash_block_size:
            raise ValueError(
                f"block_size {block_size} is not a multiple of hash_block_size {hash_block_size}"
            )
        groups = tuple(groups)
        if not groups:
            raise ValueError("a manager needs at least one KV-cache group")
        for group in groups:
            if not isinstance(group, KVCacheGroupSpec):
                raise ValueError(f"not a KVCacheGroupSpec: {group!r}")
        self.block_size = block_size
        self.hash_block_size = hash_block_size
        self.hashing = hashing
        if hashing is not None and hash_function is sha256_hash:
            hash_function = hashing.digest
        self.hash_function = hash_function
        self.groups: tuple[KVCacheGroupSpec, ...] = groups
        self.enable_caching = bool(enable_caching)
        self.block_pool = BlockPool(
            num_gpu_blocks,
            self.enable_caching,
            hash_block_size=hash_block_size,
            enable_kv_cache_events=enable_kv_cache_events,
        )
        self.null_block = self.block_pool.null_block
        #: Whether a block is not the null block (an identity test, run from C).
        self._not_null = partial(is_not, self.null_block)
        self.num_groups = len(groups)
        self._group_ids = tuple(range(self.num_groups))
        self._full_group_ids = tuple(g for g in self._group_ids if not groups[g].is_sliding)
        self._sliding_group_ids = tuple(g for g in self._group_ids if groups[g].is_sliding)
        #: Per group, its window in tokens (0: full attention) and the blocks at the end of
        #: a prefix it reads for the next token (its ``window - 1`` tokens, rounded up).
        self._window_tokens = tuple(g.window_tokens(block_size) for g in groups)
        if any(g.is_sliding and w < 2 for g, w in zip(groups, self._window_tokens, strict=True)):
            raise ValueError("a sliding window must read at least one token before the written one")
        self._windows = tuple(-(-(w - 1) // block_size) if w else 0 for w in self._window_tokens)
        # The common model: one full-attention group (id 0), its prefix looked up in one call.
        self._one_group = self._full_group_ids == (0,) and not self._sliding_group_ids
        # Hash blocks per block: block i's prefix hash is the last fine hash inside it.
        self._scale = block_size // hash_block_size
        self.requests: dict[str, ManagedRequest] = {}

    @property
    def has_sliding_window(self) -> bool:
        return bool(self._sliding_group_ids)

    @property
    def supports_partial_caching(self) -> bool:
        """Whether ``commit(..., cache_partial=True)`` is allowed (every group full attention)."""
        return not self._sliding_group_ids

    # ============================================================ scheduling

    def admit(
        self,
        request_id: str,
        tokens: Sequence[int],
        salt: str | None = None,
        *,
        lora: LoraKey | None = None,
        mm_features: Sequence[MultiModalKey] = (),
        prompt_embeds: Sequence[int] | None = None,
        report_mode: str = "incremental",
    ) -> Scheduled | None:
        """A new request: find its cached prefix, touch every hit, allocate the rest.

        ``salt``, ``lora`` (name, path), ``mm_features`` ((identifier, offset, length)
        inside the prompt, sorted and disjoint) and ``prompt_embeds`` (one value per prompt
        token) go into the block hashes: a request differing in one never shares a block
        over which it differs. A request in the ``"full"`` ``report_mode`` has its hits
        published again (one ``BlockStored`` per group, no parent) whenever it is looked
        up, here and at every resume, room or not.

        Pre: ``request_id`` is not live (rule ``request-new``); ``tokens`` is a non-empty
        sequence of ints >= 0 (rule ``request-tokens``); ``report_mode`` is
        ``"incremental"`` or ``"full"`` (rule ``request-report-mode``).
        Post: ``None`` and nothing changed (the request stays unknown) when the pool lacks
        room; otherwise the request runs with tables covering every token, and
        ``copies`` lists the partial-entry copies to make before ``copies_done``.
        """
        op = "admit"
        if request_id in self.requests:
            raise KVCacheManagerError(op, "request-new", request_id, "already known")
        token_list = self._checked_tokens(op, request_id, tokens)
        if report_mode not in _REPORT_MODES:
            raise KVCacheManagerError(
                op, "request-report-mode", request_id, f"report mode {report_mode!r}"
            )
        if prompt_embeds is not None and len(prompt_embeds) != len(token_list):
            raise KVCacheManagerError(
                op, "request-extra-keys", request_id, "prompt embeddings not one per token"
            )
        n_tokens = len(token_list)
        if mm_features and any(o < 0 or n < 1 or o + n > n_tokens for _, o, n in mm_features):
            raise KVCacheManagerError(
                op, "request-extra-keys", request_id, "a multimodal feature outside the prompt"
            )
        req = ManagedRequest(
            Request(request_id, token_list, []),
            salt,
            self.num_groups,
            lora,
            mm_features,
            prompt_embeds,
            report_mode,
        )
        # The lookup hashes the prompt as far as it reads (through the first block the
        # cache lacks): a request refused for want of room hashes no more than that.
        scheduled = self._schedule(req)
        if scheduled is not None:
            if self.enable_caching:
                self._extend_block_hashes(req)  # the rest of the prompt
            self.requests[request_id] = req
        return scheduled

    def resume(self, request_id: str) -> Scheduled | None:
        """Schedule a preempted request again, exactly as if it were admitted now.

        Pre: the request is known and preempted (rule ``request-preempted``).
        Post: as :meth:`admit`; on ``None`` it stays preempted.
        """
        req = self.requests.get(request_id)
        if req is None or req.running:
            raise KVCacheManagerError(
                "resume", "request-preempted", request_id, "not waiting after a preemption"
            )
        return self._schedule(req)

    def append(self, request_id: str, tokens: Sequence[int]) -> Scheduled | None:
        """A running request grows by ``tokens``: allocate the blocks they need.

        Pre: the request runs (rule ``request-running``), no copy is pending (rule
        ``copies-pending``), ``tokens`` non-empty ints >= 0 (rule ``request-tokens``).
        Post: ``None`` and nothing changed if the pool has too few free blocks for every
        group; otherwise the tokens are the request's (not yet computed) and each table
        has grown by the same number of new blocks.
        """
        op = "append"
        req = self._running(op, request_id)
        # checked as given (a list or a tuple is not copied), then copied into the request
        new_tokens = self._checked_tokens(op, request_id, tokens, copy=False)
        request = req.request
        tokens_now = request.all_token_ids
        num_tokens = len(tokens_now) + len(new_tokens)
        need = -(-num_tokens // self.block_size) - len(req.blocks[0])
        if need > 0:
            if self.block_pool.get_num_free_blocks() < need * self.num_groups:
                return None
            new = self._allocate(need)
            for table, ids, fresh in zip(req.blocks, req.block_ids, new, strict=True):
                table.extend(fresh)
                ids.extend(map(_block_id, fresh))
            req.shown = None
        tokens_now.extend(new_tokens)
        # Hashing only once a hash block is complete (not on most one-token appends).
        hbs = self.hash_block_size
        if self.enable_caching and num_tokens - len(request.block_hashes) * hbs >= hbs:
            self._extend_block_hashes(req)
        return Scheduled(req.num_computed_tokens, req.tables())

    # ============================================================ one forward pass

    def prepare_write(self, request_id: str) -> Scheduled | None:
        """Copy-on-write before the pass: the block where the next pending token goes must
        be writable; a registered one (the request cached it as a partial entry) gets a
        fresh block to copy its data into, and the table keeps it.

        Pre: the request runs; no copy is pending.
        Post: ``None`` and nothing changed if there are fewer free blocks than tails to
        copy; otherwise one new block per such tail (group order), listed in ``copies`` as
        ``(tail, copy)``. The engine copies, then calls ``copies_done``.
        """
        op = "prepare_write"
        req = self._running(op, request_id)
        bs = self.block_size
        computed = req.num_computed_tokens
        # Only a block already partly computed can carry a key; a block started afresh
        # is a new one, writable by construction.
        if computed % bs and computed < len(req.request.all_token_ids):
            first = computed // bs
            writable = self.block_pool.is_block_writable
            tails = [(g, t[first]) for g, t in enumerate(req.blocks) if not writable(t[first])]
            if tails:
                if self.block_pool.get_num_free_blocks() < len(tails):
                    return None
                req.copies = tuple(self._prepare_running_copy(req, tails))
                return Scheduled(computed, req.tables(), req.copies)
        req.copies = ()
        return Scheduled(computed, req.tables())

    def copies_done(self, request_id: str) -> None:
        """The engine has made the copies it was given; finish the copy protocol.

        Pre: the request is known (rule ``request-known``).
        Post: for scheduling copies, the partial-entry sources are released (one
        ``free_blocks``); for running copies, each tail's keys moved to its copy
        (``move_block_hashes``, in order) and the copies released (one ``free_blocks``),
        so every tail is writable again. With nothing pending, nothing happens.
        """
        req = self.requests.get(request_id)
        if req is None:
            raise KVCacheManagerError("copies_done", "request-known", request_id, "unknown")
        if req.pending_moves or req.pending_release:
            self._finish_copies(req)

    def commit(self, request_id: str, cache_partial: bool = False) -> Scheduled:
        """After the engine wrote every pending token: register what became cacheable and
        slide the windows.

        Pre: the request runs (rule ``request-running``); ``cache_partial`` only when every
        group is full attention (rule ``partial-full-attention``); no copy is pending.
        Post: the newly full blocks of every group are cached; with ``cache_partial`` the
        tail too, as a partial entry over every full hash block; entries that left a
        sliding window are the null block and their blocks freed (tail first, one call per
        group); every token is computed. ``copies`` repeats those of ``prepare_write``.
        """
        op = "commit"
        req = self._running(op, request_id)
        if cache_partial and self._sliding_group_ids:
            raise KVCacheManagerError(
                op, "partial-full-attention", request_id, "a sliding-window group is configured"
            )
        num_tokens = len(req.request.all_token_ids)
        num_full = num_tokens // self.block_size
        # Every group has cached as many blocks (they are set together): nothing to
        # register unless a block became full or the tail is asked for.
        if self.enable_caching and (cache_partial or num_full > req.num_cached_blocks[0]):
            self._cache_blocks(req, num_full, cache_partial)
            req.num_cached_blocks = [num_full] * self.num_groups
        if self._sliding_group_ids:
            self._slide_windows(req, num_tokens)
        req.num_computed_tokens = num_tokens
        copies, req.copies = req.copies, ()
        return Scheduled(num_tokens, req.tables(), copies)

    # ============================================================ release

    def preempt(self, request_id: str) -> None:
        """Take a running request off the device; it keeps its tokens.

        Pre: the request runs (rule ``request-running``).
        Post: pending copies are dropped (their held blocks released first, keys not
        moved), then every table freed group by group, tail first; the request holds no
        block, has nothing computed and waits for ``resume``.
        """
        req = self._running("preempt", request_id, allow_pending=True)
        self._release(req)
        req.running = False
        n = self.num_groups
        req.blocks = [[] for _ in range(n)]
        req.block_ids = [[] for _ in range(n)]
        req.shown = None
        req.num_computed_tokens = 0
        req.num_cached_blocks = [0] * n
        req.num_nulled = [0] * n
        req.copies = ()

    def finish(self, request_id: str) -> None:
        """The request is done or aborted: release what it holds (as :meth:`preempt`) and
        forget it. Pre: the request is known (rule ``request-known``)."""
        req = self.requests.get(request_id)
        if req is None:
            raise KVCacheManagerError("finish", "request-known", request_id, "unknown")
        self._release(req)
        del self.requests[request_id]

    def reset_prefix_cache(self) -> bool:
        """The pool's ``reset_prefix_cache``: succeeds exactly when no block is held."""
        return self.block_pool.reset_prefix_cache()

    # ============================================================ reads

    def get_block_ids(self, request_id: str) -> BlockIds:
        """The request's tables as block ids (empty while preempted)."""
        return self._known("get_block_ids", request_id).tables()

    def get_num_computed_tokens(self, request_id: str) -> int:
        return self._known("get_num_computed_tokens", request_id).num_computed_tokens

    def is_running(self, request_id: str) -> bool:
        return self._known("is_running", request_id).running

    def is_block_writable(self, block_id: int) -> bool:
        """The pool's ``is_block_writable`` for block ``block_id`` (range-checked)."""
        pool = self.block_pool
        if isinstance(block_id, bool) or not isinstance(block_id, int):
            raise ValueError(f"a block id must be an int, got {block_id!r}")
        if not 0 <= block_id < pool.num_gpu_blocks:
            raise ValueError(f"block id {block_id} is not in [0, {pool.num_gpu_blocks})")
        return pool.is_block_writable(pool.blocks[block_id])

    # ============================================================ hooks: scheduling

    def _extra_keys(self, req: ManagedRequest, start: int, end: int) -> tuple[object, ...] | None:
        """The extra keys of the request's hash block ``start .. end - 1``: its salt, LoRA
        adapter, the multimodal features in the block and its embeddings there (laid out
        as the spec does, or as the release of ``hashing`` does). For a request with
        neither features nor embeddings they depend on the block only through whether it
        is the first (a release salts only that one): they are asked once per request."""
        if self.hashing is not None:
            return self.hashing.block_keys(
                start, end, req.salt, req.lora, req.mm_features, req.prompt_embeds
            )
        return generate_block_hash_extra_keys(
            start, end, req.salt, req.lora, req.mm_features, req.prompt_embeds
        )

    def _extend_block_hashes(self, req: ManagedRequest, through: int | None = None) -> None:
        """Hash the full hash blocks of the first ``through`` tokens (all of them for
        ``None``) not hashed yet, chained on the last hash: the result equals hashing every
        token again, at the cost of the new ones."""
        request = req.request
        tokens, hashes = request.all_token_ids, request.block_hashes
        end = len(tokens) if through is None else min(through, len(tokens))
        hbs = self.hash_block_size
        first = len(hashes) * hbs
        if end - first < hbs:
            return
        if self.hashing is not None:
            self._extend_release_hashes(req, first, end)
            return
        parent = hashes[-1] if hashes else None
        hash_function = self.hash_function
        uniform = req.uniform_keys
        keys: tuple[object, ...] | None = None
        if uniform:
            if req.block_keys is _NOT_ASKED:
                req.block_keys = self._extra_keys(req, first, first + hbs)
            keys = req.block_keys  # type: ignore[assignment]
        if uniform and hash_function is sha256_hash:
            # The default hash: every new block in one call, no per-token Python work.
            hashes.extend(hash_token_blocks(parent, tokens[first:end], hbs, keys))
            return
        for start in range(first, end - hbs + 1, hbs):
            if not uniform:
                keys = self._extra_keys(req, start, start + hbs)
            parent = hash_block_tokens(hash_function, parent, tokens[start : start + hbs], keys)
            hashes.append(parent)

    def _extend_release_hashes(self, req: ManagedRequest, first: int, end: int) -> None:
        """``_extend_block_hashes`` under a release's hashing: each block's input
        ``(parent, tokens, keys)`` digested once, its tokens a tuple cut by ``zip`` from
        one slice of the new tokens (in C); the parent chain kept in ``block_hashes``."""
        hashing = self.hashing
        assert hashing is not None
        request = req.request
        hashes = request.block_hashes
        hbs = self.hash_block_size
        digest = self.hash_function
        parent = hashes[-1] if hashes else hashing.none_hash
        tokens = iter(request.all_token_ids[first : first + (end - first) // hbs * hbs])
        blocks = zip(*[tokens] * hbs, strict=True)  # each block's tokens as a tuple
        if not req.uniform_keys:
            for start, block in enumerate(blocks):
                at = first + start * hbs
                parent = digest((parent, block, self._extra_keys(req, at, at + hbs)))
                hashes.append(parent)
            return
        if first == 0:  # the first block carries the salt
            parent = digest((parent, next(blocks), self._extra_keys(req, 0, hbs)))
            hashes.append(parent)
        if req.block_keys is _NOT_ASKED:
            req.block_keys = self._extra_keys(req, hbs, 2 * hbs)
        keys = req.block_keys
        if digest is pickle_sha256:
            # vLLM's default, inlined: one pickle and one SHA-256 per block, both in C.
            sha256, dumps, protocol = _sha256, _dumps, _PROTOCOL
            hashes += [
                parent := sha256(dumps((parent, block, keys), protocol)).digest()
                for block in blocks
            ]
            return
        hashes += [parent := digest((parent, block, keys)) for block in blocks]

    def _schedule(self, req: ManagedRequest) -> Scheduled | None:
        """Give a request that does not run tables covering all its tokens.

        Order (the one every scheduler must keep): look the prefix up, check there is
        room for everything at once, touch every hit, only then allocate: allocating first
        could evict a free hit the request is about to use.
        """
        num_tokens = len(req.request.all_token_ids)
        if self.enable_caching:
            hit = self._find_cached_prefix(req, num_tokens)
            if req.report_mode == "full" and hit.num_blocks:
                pool, bs = self.block_pool, self.block_size
                for g in self._group_ids:
                    pool.emit_cached_block_events(req.request, hit.num_blocks, bs, g)
        else:
            hit = PrefixHit(0, [[] for _ in self._group_ids], [], 0)
        per_group = _cdiv(num_tokens, self.block_size) - hit.num_blocks
        hits: list[KVCacheBlock] = []
        for g, table in enumerate(hit.blocks):
            # Only a sliding window's table holds the null block.
            hits.extend(filter(self._not_null, table) if self._windows[g] else table)
        hits.extend(hit.partial)
        # A free hit leaves the free queue when touched, so it needs room like a new block;
        # a hit some request already holds does not (each block counted once; in C).
        free_hits = len(set(compress(hits, map(not_, map(_ref_cnt, hits)))))
        if not self._has_room(per_group * self.num_groups + free_hits):
            return None
        new = self._touch_and_allocate(hits, per_group)
        req.blocks = [hit.blocks[g] + new[g] for g in self._group_ids]
        req.block_ids = [list(map(_block_id, table)) for table in req.blocks]
        req.shown = None
        # A partial entry is never written in place: the first new block of each group is
        # its private copy; the source stays held until the engine has copied it.
        copies: Copies = ()
        if hit.partial:
            copies = tuple(
                (src.block_id, fresh[0].block_id)
                for src, fresh in zip(hit.partial, new, strict=True)
            )
            req.pending_release = list(hit.partial)
        req.running = True
        req.num_computed_tokens = hit.num_blocks * self.block_size + hit.partial_tokens
        req.num_cached_blocks = [hit.num_blocks] * self.num_groups
        req.num_nulled = [max(0, hit.num_blocks - w) if w else 0 for w in self._windows]
        req.copies = ()
        return Scheduled(req.num_computed_tokens, req.tables(), copies)

    def _find_cached_prefix(self, req: ManagedRequest, num_tokens: int) -> PrefixHit:
        """The longest cached prefix every group agrees on, for the request's first
        ``num_tokens`` tokens, hashing them (``_extend_block_hashes``) as far as the lookups
        read: with one full-attention group, through the first block the cache lacks (in
        runs of blocks that double); otherwise all of them, first.

        Only lookups are made in the pool. At most ``(num_tokens - 1) // block_size``
        blocks hit, so at least one token is left to compute. Full-attention groups need
        every block from the first; sliding-window groups only the last
        ``sliding_window_blocks`` of the prefix. With no sliding group, the block after the
        hits may be a partial entry (largest first).
        """
        bs = self.block_size
        scale = self._scale
        lookup = self.block_pool.get_cached_block
        null = self.null_block
        limit = (num_tokens - 1) // bs
        full_ids = self._full_group_ids
        sliding_ids = self._sliding_group_ids
        windows = self._windows
        block_hashes = req.request.block_hashes

        found: dict[int, list[KVCacheBlock]] = {g: [] for g in full_ids}
        length = limit
        if self._one_group:
            # One full-attention group: hash a run of blocks, look its hits up in one call
            # (up to the first miss), and hash the next, twice as long, only if all hit.
            hits = found[0]
            run = _FIRST_HASHED_RUN
            while len(hits) < limit:
                start, end = len(hits), min(limit, len(hits) + run)
                self._extend_block_hashes(req, end * bs)
                prefix = islice(block_hashes, start * scale + scale - 1, end * scale, scale)
                hits += self.block_pool.get_cached_prefix(prefix, 0)
                if len(hits) < end:
                    break
                run *= 2
            length = len(hits)
            # The partial entries after the hits are keyed inside the next block.
            self._extend_block_hashes(req, min(num_tokens, (length + 1) * bs))
        else:
            self._extend_block_hashes(req, num_tokens)
        if full_ids and not self._one_group:
            length = 0
            while length < limit:
                blocks = lookup(block_hashes[(length + 1) * scale - 1], full_ids)
                if blocks is None:
                    break
                for g, block in zip(full_ids, blocks, strict=True):
                    found[g].append(block)
                length += 1

        # Sliding windows: the longest length whose window blocks all hit, scanning each
        # window from the right. A miss at position p fails every length that still needs
        # p (those in (p, length]), so the next length to try is p itself: each position is
        # looked up at most once instead of once per length tried.
        window_found: dict[tuple[int, int], KVCacheBlock] = {}
        while sliding_ids and length > 0:
            window_found.clear()
            miss = -1
            for index in range(length - 1, -1, -1):
                wanted = tuple(g for g in sliding_ids if index >= length - windows[g])
                if not wanted:
                    break  # no window reaches back this far
                blocks = lookup(block_hashes[(index + 1) * scale - 1], wanted)
                if blocks is None:
                    miss = index
                    break
                for g, block in zip(wanted, blocks, strict=True):
                    window_found[(g, index)] = block
            if miss < 0:
                break
            length = miss

        tables: list[list[KVCacheBlock]] = []
        for g in self._group_ids:
            w = windows[g]
            if not w:
                tables.append(found[g][:length])
            else:
                start = max(0, length - w)
                tables.append([null] * start + [window_found[(g, i)] for i in range(start, length)])

        partial: list[KVCacheBlock] = []
        partial_tokens = 0
        if not sliding_ids:
            hbs = self.hash_block_size
            for fine in range(scale - 1, 0, -1):
                covered = length * bs + fine * hbs
                if covered > num_tokens - 1:
                    continue  # always leave a token to compute
                blocks = lookup(block_hashes[covered // hbs - 1], self._group_ids)
                if blocks is not None:
                    partial, partial_tokens = blocks, fine * hbs
                    break
        return PrefixHit(length, tables, partial, partial_tokens)

    def _has_room(self, needed: int) -> bool:
        """Whether the pool has ``needed`` free blocks now."""
        return self.block_pool.get_num_free_blocks() >= needed

    def _touch_and_allocate(
        self, hits: Sequence[KVCacheBlock], per_group: int
    ) -> list[list[KVCacheBlock]]:
        """Touch every hit (one call), then allocate ``per_group`` blocks per group.

        Pre: the room was checked for the new blocks and the free hits together. Touching
        first takes the free hits out of the free queue so the allocation cannot evict them.
        """
        if hits:
            self.block_pool.touch(hits)
        return self._allocate(per_group)

    def _allocate(self, per_group: int) -> list[list[KVCacheBlock]]:
        """``per_group`` new blocks for every group, group by group (no call for 0)."""
        if per_group == 0:
            return [[] for _ in self._group_ids]
        get = self.block_pool.get_new_blocks
        return [get(per_group) for _ in self._group_ids]

    # ============================================================ hooks: forward pass

    def _prepare_running_copy(
        self, request: ManagedRequest, tails: Sequence[tuple[int, KVCacheBlock]]
    ) -> list[tuple[int, int]]:
        """Copy-on-write on the running path, keeping the table: one new block per
        ``(group, tail)`` (``get_new_blocks(1)`` each, in order) receives the tail's data;
        ``copies_done`` moves the tail's keys to it and releases it.

        Pre: room for ``len(tails)`` blocks was checked. Returns the ``(tail, copy)`` ids.
        """
        get = self.block_pool.get_new_blocks
        moves: list[tuple[KVCacheBlock, KVCacheBlock]] = []
        for _group, src in tails:
            (dst,) = get(1)
            moves.append((src, dst))
        request.pending_moves = moves
        request.pending_release = [dst for _, dst in moves]
        return [(src.block_id, dst.block_id) for src, dst in moves]

    def _finish_copies(self, request: ManagedRequest) -> None:
        """The copies are made: move keys (data and cache entries now agree), then release
        the blocks held for the copies, in one ``free_blocks``."""
        pool = self.block_pool
        moves, release = request.pending_moves, request.pending_release
        request.pending_moves, request.pending_release = [], []
        for src, dst in moves:
            pool.move_block_hashes(src, dst)
        if release:
            pool.free_blocks(release)

    def _cache_blocks(self, request: ManagedRequest, num_full: int, cache_partial: bool) -> None:
        """Register every group's newly full blocks, then (``cache_partial``) every group's
        tail as a partial entry covering all full hash blocks, when that covers more than
        the full blocks do. Pre: caching is on; the request's hashes cover its tokens."""
        pool = self.block_pool
        bs = self.block_size
        req = request.request
        for g, table in enumerate(request.blocks):
            cached = request.num_cached_blocks[g]
            if num_full > cached:
                pool.cache_full_blocks(req, table, cached, num_full, bs, g)
        if cache_partial:
            partial_tokens = len(req.block_hashes) * self.hash_block_size
            if partial_tokens > num_full * bs:
                for g, table in enumerate(request.blocks):
                    pool.cache_partial_block(req, table[num_full], partial_tokens, g, bs)

    def _slide_windows(self, request: ManagedRequest, num_tokens: int) -> None:
        """Null and free, per sliding group, the whole blocks before token
        ``num_tokens - window + 1`` (the first the next token reads); each group's dropped
        blocks go in one ``free_blocks``, tail first (so the earlier blocks, which more
        prefixes share, are evicted last)."""
        null = self.null_block
        pool = self.block_pool
        for g in self._sliding_group_ids:
            cutoff = min(
                len(request.blocks[g]),
                max(0, num_tokens - self._window_tokens[g] + 1) // self.block_size,
            )
            start = request.num_nulled[g]
            if cutoff <= start:
                continue
            table, ids = request.blocks[g], request.block_ids[g]
            dropped = [b for b in reversed(table[start:cutoff]) if not b.is_null]
            if dropped:
                pool.free_blocks(dropped)
            table[start:cutoff] = [null] * (cutoff - start)
            ids[start:cutoff] = [0] * (cutoff - start)
            request.num_nulled[g] = cutoff
            request.shown = None

    # ============================================================ hooks: release

    def _release(self, request: ManagedRequest) -> None:
        """Give back everything ``request`` holds: blocks held for pending copies first
        (keys are not moved: the copies may not exist), then its tables."""
        if request.pending_release:
            self.block_pool.free_blocks(request.pending_release)
        request.pending_moves, request.pending_release = [], []
        self._free_tables(request.blocks)

    def _free_tables(self, tables: Iterable[Sequence[KVCacheBlock]]) -> None:
        """Free every table, group by group, each tail first, nulls skipped (one call per
        non-empty group). Freed keyed blocks join the back of the free queue in the order
        given, so a request's longest prefix is evicted first and its head, which every
        hit needs, last."""
        free = self.block_pool.free_blocks
        windows = self._windows
        for g, table in enumerate(tables):
            # only a sliding window's table holds the null block
            blocks = [*filter(self._not_null, reversed(table))] if windows[g] else table[::-1]
            if blocks:
                free(blocks)

    # ============================================================ contract checks

    def _known(self, op: str, request_id: str) -> ManagedRequest:
        req = self.requests.get(request_id)
        if req is None:
            raise KVCacheManagerError(op, "request-known", request_id, "unknown")
        return req

    def _running(self, op: str, request_id: str, allow_pending: bool = False) -> ManagedRequest:
        req = self.requests.get(request_id)
        if req is None or not req.running:
            raise KVCacheManagerError(op, "request-running", request_id, "not running")
        if not allow_pending and (req.pending_moves or req.pending_release):
            raise KVCacheManagerError(
                op, "copies-pending", request_id, "copies were handed out; call copies_done first"
            )
        return req

    @staticmethod
    def _checked_tokens(
        op: str, request_id: str, tokens: Sequence[int], copy: bool = True
    ) -> list[int]:
        """``tokens`` as a new list (unless ``copy`` is off and they are a list or a tuple:
        then as given). Pre (rule ``request-tokens``): non-empty, ints >= 0."""
        token_list: list[int] = (
            tokens  # type: ignore[assignment]
            if not copy and type(tokens) in (list, tuple)
            else list(tokens)
        )
        # Both checks run in C, with no Python work per token.
        if (
            not token_list
            or countOf(map(type, token_list), int) != len(token_list)
            or not _non_negative(token_list)
        ):
            shown = list(token_list) if len(token_list) <= 16 else [*token_list[:16], "..."]
            raise KVCacheManagerError(op, "request-tokens", request_id, f"tokens {shown}")
        return token_list
