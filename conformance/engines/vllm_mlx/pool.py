"""A target for vllm-mlx's ``PagedCacheManager`` (PyPI ``vllm-mlx``; its cache module is pure
Python, so ``pip install --no-deps vllm-mlx`` is all it needs: no MLX, no torch).

vllm-mlx re-implements vLLM's block pool with its own API and its own policy. This adapter
drives the pool's vLLM-style public methods (its own server's ``BlockAwarePrefixCache`` uses
older id-based ones instead: ``allocate_block``, ``increment_ref``, ``free_block`` and a
per-block token hash that is not chained, ``register_block_hash``/``find_cached_block``):

=====================  ==================================================================
spec action            ``PagedCacheManager`` call
=====================  ==================================================================
``GetNewBlocks(n)``    ``get_new_blocks(n)``, the blocks' ``block_id`` read back
``FreeBlocks(ids)``    ``free_block_batch(blocks)`` (its batch free, "in eviction order")
``Touch(ids)``         ``touch(blocks)``
``CacheFullBlocks``    ``cache_full_blocks([block], tokens, 0, 1)``, once per new full
                       block (see *Keys* below); it has no ``block_mask``
``GetCachedBlock``     ``get_cached_block(pool_hash)``, once per group, all or nothing
``ResetPrefixCache``   ``reset_prefix_cache()``
``GetUsage``           the ``usage`` property
``GetNumFreeBlocks``   the ``free_blocks`` property
=====================  ==================================================================

The pool has no ``evict_first``, no ``block_mask``, no peer pool or block-to-pool
reference, no ``unpin_blocks``, ``cache_partial_block``, ``evict_blocks`` (its
``evict_lru_blocks(n)`` rotates the queue front instead), ``move_block_hashes`` or
``is_block_writable``, and no KV events: none of those is declared, and each raises if
asked.

**Ids.** The pool numbers its blocks ``0 … max_blocks-1`` and, like vLLM, pops block 0 off
its free list at construction as the null block (``is_null``, ``ref_count`` 1). So the
pool is built with ``max_blocks = num_gpu_blocks`` and ids map one to one, null included.
Its API takes block objects, not ids: an id outside ``0 … N-1`` names no object, so the
adapter raises for it before calling anything (such a call cannot be made).

**Keys.** The spec's key is the request's chained hash at the block's end (viewed at the
action's ``block_size``) plus the group id as 4 big-endian bytes; the pool hashes tokens
itself, chaining each block's SHA-256 onto its parent block's hash, and has no groups. The
adapter gives every distinct spec key one token (a counter, first seen first) and caches
each block by a call of its own whose token list is that single token, so the pool's key
is ``compute_block_hash(None, [token])``: a one-to-one image of the spec key (the chain is
already inside the spec's hash; the group is inside the key). Caching a whole batch in one
call would chain each pool key onto the *pool's* hash of the block before it in the list,
which depends on what that block happens to hold, so one spec key would get several pool
keys. The pool is built with ``block_size=1`` since each block is one token to it. A block
whose hash the request does not have (too few ``block_hashes``) gets no token, as a request
with fewer tokens would; the pool then hashes the empty block, a key the spec never names,
shown as the pool's raw hash. Lookups ask the pool once per group and return ``None`` if
any group misses, as the spec's multi-group ``get_cached_block`` does; the pool's lookup
changes nothing but its statistics. Every block in ``blocks[num_cached:num_full]`` is
offered, the null block too: skipping it (and masking blocks out) is the pool's job, and
this pool does neither.

**What it shows** (read off its fields; the hash map's ``_cache`` is the one private one).
The free queue (a capped walk of its linked list from ``fake_head``),
``ref_count`` per block (the null block's less the pool's own hold on it), each block's own
``block_hash`` as its one key, the hash map itself as the index (read apart from the
blocks, so the two can disagree), what its lookups answer for keys that left the map, and
its structure: the list's links both ways, ``num_free_blocks``, and ``allocated_blocks``
(the pool's index of the blocks that are out of the free list).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any

from kvpool.spec import (
    Action,
    CacheFullBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    Observation,
    PoolConfig,
    Profile,
    ResetPrefixCache,
    Touch,
)
from kvpool.spec.profile import VLLM_MLX

from ...machines.pool.target import PoolView
from ...targets.free_list import free_list_order, free_list_problems
from ...targets.hash_index import read_index
from ...targets.index_probe import IndexProbe
from ...targets.isolated_files import IsolatedLoadError, load_isolated
from ...targets.releases.files import ReleaseFiles, ReleaseFilesError, cached_files

#: The release this adapter was written against and checked with.
VLLM_MLX_VERSION = "0.6.0"
#: What to run when the package is missing.
INSTALL_HINT = f"pip install --no-deps vllm-mlx=={VLLM_MLX_VERSION}"

#: The spec operations with a faithful counterpart in ``PagedCacheManager``.
OPERATIONS = VLLM_MLX.operations
#: What the adapter can read off the pool.
OBSERVES = frozenset({"free_queue", "ref_cnt", "keys", "index", "structure"})

#: vllm-mlx 0.6.0's pool in the spec's terms (as vLLM 0.10's, less its events): every freed
#: block goes to the back of the queue (keyed or not, caching on or off); no ``evict_first``,
#: no ``block_mask``; ``cache_full_blocks`` skips a block that already has a key instead of
#: re-keying it, which is outside its contract; only :data:`OPERATIONS` exist. (It also
#: caches a null block instead of skipping it: a finding, invariant 'null-block-inert'.)
#: The request's hashes may be finer than its blocks (the adapter hands the pool one token
#: per block). Freeing the null block is skipped but touching it raises its ``ref_count``
#: (not compared: the profile says it moves).
#: The profile a vllm-mlx target is checked with by default.
VLLM_MLX_PROFILE = VLLM_MLX

_GROUP_ID_BYTES = 4
#: The hold the pool takes on its null block at construction (``ref_count`` 1): the view
#: shows the null block's count less it, counted as the spec counts it (from 0).
NULL_HOLD = 1


class VllmMlxUnavailable(ImportError):
    """vllm-mlx is not installed (or its cache module does not import)."""


#: The one file of the wheel the target needs, kept by the loader of engine releases.
MEMBER = "vllm_mlx/paged_cache.py"
FILES = ReleaseFiles(
    "vllm-mlx",
    "vllm-mlx",
    frozenset({MEMBER}),
    label="vllm-mlx",
    advice=f"or install it: {INSTALL_HINT}  (--no-deps: its cache module needs no MLX)",
)


def load_paged_cache() -> ModuleType:
    """``vllm_mlx.paged_cache``: the installed package's, or else the one file of the
    release's wheel, downloaded once into the user's cache and loaded on its own.
    :class:`VllmMlxUnavailable` says what to do when neither works.

    The module imports only the standard library, so no placeholder for MLX is needed.
    """
    try:
        module = importlib.import_module("vllm_mlx.paged_cache")
    except ImportError:
        module = _cached_paged_cache()
    # The pool warns through logging (e.g. a refused reset); without a handler Python would
    # print each warning to stderr in the middle of a run's progress display.
    logging.getLogger(module.__name__).addHandler(logging.NullHandler())
    return module


def installed_version() -> str:
    """The installed vllm-mlx release, or the cached one the target falls back to."""
    try:
        return version("vllm-mlx")
    except PackageNotFoundError:
        return VLLM_MLX_VERSION


def _cached_paged_cache() -> ModuleType:
    try:
        root = cached_files(FILES, VLLM_MLX_VERSION)
        name = MEMBER.removesuffix(".py").replace("/", ".")
        return load_isolated("vllm_mlx", {name: root / MEMBER})[name]
    except (ReleaseFilesError, IsolatedLoadError) as exc:
        raise VllmMlxUnavailable(f"vllm-mlx is not installed and {exc}") from exc


def spec_key(block_hash: bytes, group_id: int) -> bytes:
    """The spec's key: the block hash, then the group id as 4 big-endian bytes."""
    return block_hash + group_id.to_bytes(_GROUP_ID_BYTES, "big", signed=False)


class KeyTokens:
    """Spec keys as one-token blocks for the pool, and the pool's hashes back as spec keys."""

    def __init__(self, paged_cache: ModuleType) -> None:
        self._hash_tokens = paged_cache.compute_block_hash
        self._tokens: dict[bytes, int] = {}
        self._keys: dict[bytes, bytes] = {}

    def tokens(self, key: bytes) -> list[int]:
        """The pool's token list for a block cached under ``key`` (a new token if unseen)."""
        token = self._tokens.get(key)
        if token is None:
            token = self._tokens[key] = len(self._tokens) + 1
            self._keys[self.pool_hash_of_tokens([token])] = key
        return [token]

    def pool_hash_of_tokens(self, tokens: list[int]) -> bytes:
        """The pool's own hash of a block with these tokens and no parent."""
        return bytes(self._hash_tokens(None, tokens))

    def pool_hash(self, key: bytes) -> bytes:
        return self.pool_hash_of_tokens(self.tokens(key))

    def key(self, pool_hash: bytes) -> bytes:
        """The spec key the pool's hash stands for; an unknown hash is shown as it is."""
        return self._keys.get(pool_hash, pool_hash)


@dataclass(frozen=True)
class _QueueEnds:
    """vllm-mlx's free list under the names :mod:`.free_list` walks (its sentinels are called
    ``fake_head``/``fake_tail``)."""

    fake_free_list_head: Any
    fake_free_list_tail: Any
    num_free_blocks: int


class VllmMlxTarget:
    """Drives a vllm-mlx ``PagedCacheManager`` with the spec's actions."""

    operations = OPERATIONS
    observes = OBSERVES

    def __init__(self, paged_cache: ModuleType, config: PoolConfig, profile: Profile) -> None:
        self.version = installed_version()
        self.name = f"vllm-mlx {self.version}"
        self.config = config
        self.profile = profile
        self.pool: Any = paged_cache.PagedCacheManager(
            block_size=1, max_blocks=config.num_gpu_blocks, enable_caching=config.enable_caching
        )
        self.keys = KeyTokens(paged_cache)
        #: Keys that were in the index, looked up once they leave it.
        self.probe = IndexProbe()

    # --- translating ids and keys -------------------------------------------------------

    def _block(self, block_id: int) -> Any:
        blocks = self.pool.blocks
        if not 0 <= block_id < len(blocks):
            raise IndexError(
                f"block {block_id} is not in 0..{len(blocks) - 1}: vllm-mlx's pool takes "
                "block objects, so no call can name it"
            )
        return blocks[block_id]

    def _blocks(self, ids: tuple[int, ...]) -> list[Any]:
        return [self._block(i) for i in ids]

    def _block_tokens(self, action: CacheFullBlocks, index: int) -> list[int]:
        """The pool's tokens for block ``index`` of the request: its spec key as one token,
        or none if the request's hashes end before the block does."""
        hbs = self.config.hash_block_size
        if action.block_size <= 0 or action.block_size % hbs:
            raise ValueError(
                f"block_size {action.block_size} is not a multiple of hash_block_size {hbs}: "
                "the request has no hash at the block's end to give the pool"
            )
        last = (index + 1) * (action.block_size // hbs) - 1
        if last >= len(action.block_hashes):
            return []
        return self.keys.tokens(spec_key(action.block_hashes[last], action.group_id))

    # --- the actions --------------------------------------------------------------------

    def apply(self, action: Action) -> Observation:
        return Observation(self._dispatch(action))

    def _dispatch(self, action: Action) -> Any:
        pool = self.pool
        match action:
            case GetNewBlocks(num_blocks=n):
                return tuple(b.block_id for b in pool.get_new_blocks(n))
            case FreeBlocks(blocks=ids, evict_first=evict_first, foreign=foreign):
                if evict_first or foreign:
                    raise NotImplementedError(
                        "vllm-mlx's free_block_batch has no evict_first and no other pool"
                    )
                pool.free_block_batch(self._blocks(ids))
                return None
            case Touch(blocks=ids):
                pool.touch(self._blocks(ids))
                return None
            case CacheFullBlocks():
                self._cache_full_blocks(action)
                return None
            case GetCachedBlock(block_hash=block_hash, group_ids=groups):
                hits = []
                for group in groups:
                    hit = pool.get_cached_block(self.keys.pool_hash(spec_key(block_hash, group)))
                    if hit is None:
                        return None
                    hits.append(hit.block_id)
                return tuple(hits)
            case ResetPrefixCache():
                return bool(pool.reset_prefix_cache())
            case GetUsage():
                return float(pool.usage)
            case GetNumFreeBlocks():
                return int(pool.free_blocks)
        raise NotImplementedError(
            f"vllm-mlx's PagedCacheManager has no counterpart of {action.operation}"
        )

    def _cache_full_blocks(self, action: CacheFullBlocks) -> None:
        if action.block_mask is not None:
            raise NotImplementedError("vllm-mlx's cache_full_blocks has no block_mask")
        # The request's block list is built before any call, as a caller of the pool would;
        # ``num_full_blocks`` past its end fails part-way, as the pool's own loop does.
        blocks = self._blocks(action.blocks)
        for index in range(action.num_cached_blocks, action.num_full_blocks):
            # past the end the pool gets an empty list, and its own loop fails on it
            tokens = self._block_tokens(action, index)
            self.pool.cache_full_blocks(blocks[index : index + 1], tokens, 0, 1)

    # --- looking inside -----------------------------------------------------------------

    def _queue_ends(self) -> _QueueEnds:
        queue = self.pool.free_block_queue
        return _QueueEnds(queue.fake_head, queue.fake_tail, queue.num_free_blocks)

    def view(self) -> PoolView:
        blocks = self.pool.blocks
        order = free_list_order(self._queue_ends(), len(blocks))
        primary = tuple(
            self.keys.key(bytes(b.block_hash)) if b.block_hash is not None else None for b in blocks
        )
        index = read_index(self.pool.cached_block_hash_to_block, self.keys.key)
        in_index = [key for key, _ in index or ()]
        self.probe.remember(in_index)
        return PoolView(
            free_count=int(self.pool.free_blocks),
            free_queue=tuple(order) if order is not None else None,
            ref_cnt=tuple(b.ref_count - NULL_HOLD * b.is_null for b in blocks),
            # a block carries one key, its own hash; the index is read on its own, so a
            # block left in the index after it lost its hash shows as a difference
            keys=tuple(frozenset([p] if p is not None else []) for p in primary),
            primary=primary,
            index=index,
            lookups=self.probe.probe(self._lookup, skip=in_index),
        )

    def _lookup(self, key: bytes) -> int | None:
        """The block the pool's lookup returns for ``key`` (``None``: a miss)."""
        hit = self.pool.get_cached_block(self.keys.pool_hash(key))
        return None if hit is None else int(hit.block_id)

    def structure_problems(self) -> list[str]:
        blocks = self.pool.blocks
        problems = free_list_problems(self._queue_ends(), blocks)
        if problems:
            return problems
        listed = set(free_list_order(self._queue_ends(), len(blocks)) or ())
        allocated = self.pool.allocated_blocks
        for block in blocks:
            out = block.block_id not in listed
            indexed = allocated.get(block.block_id) is block
            if out and not indexed:
                problems.append(
                    f"block {block.block_id} is out of the free list but missing from "
                    "allocated_blocks"
                )
            elif indexed and not out:
                problems.append(
                    f"block {block.block_id} is in the free list and in allocated_blocks"
                )
        return problems


def vllm_mlx_target(config: PoolConfig, profile: Profile) -> VllmMlxTarget:
    """A fresh vllm-mlx ``PagedCacheManager`` behind the :class:`~..target.Target` protocol.

    Raises :class:`VllmMlxUnavailable` (with the ``pip install`` line) if vllm-mlx is missing.
    """
    return VllmMlxTarget(load_paged_cache(), config, profile)
