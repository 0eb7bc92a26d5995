"""The block pool: hands out KV-cache blocks, takes them back, and keeps the prefix cache.

A refused call (``BlockPoolError``) leaves the pool exactly as it was. The hot operations
(``free_blocks``, ``touch``) check each block in the same pass that applies the call, and
on the first block they cannot take undo what that pass did and hand the call to a careful
path that checks everything first (and routes blocks of other pools). The invariants every
operation keeps:

1. a non-null block is in the free queue iff its ``ref_cnt == 0``; ``ref_cnt >= 0``;
2. the free queue holds each block at most once, and its length is the free count;
3. a key maps to block ``b`` iff it is ``b``'s primary key or one of its extra keys;
4. a block with extra keys has a primary key;
5. the null block (id 0) is never free, never cached, never handed out;
6. block ids never change; a block handed out again has lost every key first.

The hot paths tell this pool's blocks by their ``pool`` link: the one reference all of
them share (the null block has its own), compared by identity, which reads nothing but the
block. The careful path checks the id and the block table as well.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import takewhile
from operator import countOf, is_not, length_hint
from typing import Any

from mypy_extensions import mypyc_attr

from .block import KVCacheBlock, PoolRef, group_suffix
from .errors import BlockPoolError
from .events import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent
from .free_queue import FreeKVCacheBlockQueue
from .hash_map import BlockHashToBlockMap
from .hashing import get_block_hash, get_group_id
from .request import RequestLike

ReuseWatcher = Callable[[KVCacheBlock], None]

_MEDIUM = "GPU"
_U32_LIMIT = 1 << 32


#: Whether a lookup found an entry (run from C by ``takewhile``).
_is_entry = partial(is_not, None)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_sequence(blocks: Iterable[KVCacheBlock]) -> Sequence[KVCacheBlock]:
    # A plain list or tuple as it is (its iterator knows how far it got); anything else
    # copied once, so that a refused call can be retried by the careful path.
    if type(blocks) is list or type(blocks) is tuple:
        return blocks
    return list(blocks)


# The optional compiled build (mypyc, ``python -m kvpool.conformance.tools.bench.compiled``) keeps
# the pool an ordinary class: its blocks hold it by a weak reference, which a native class
# cannot take. Interpreted, the decorator does nothing.
@mypyc_attr(native_class=False)
class BlockPool:
    """A pool of ``num_gpu_blocks`` blocks; block 0 is the null block."""

    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool,
        hash_block_size: int,
        enable_kv_cache_events: bool = False,
    ) -> None:
        if not _is_int(num_gpu_blocks) or num_gpu_blocks < 1:
            raise BlockPoolError(
                "BlockPool",
                "pool-config",
                f"num_gpu_blocks must be an int >= 1, got {num_gpu_blocks!r}",
            )
        if not _is_int(hash_block_size) or hash_block_size < 1:
            raise BlockPoolError(
                "BlockPool",
                "pool-config",
                f"hash_block_size must be an int >= 1, got {hash_block_size!r}",
            )
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = bool(enable_caching)
        self.hash_block_size = hash_block_size
        self.enable_kv_cache_events = bool(enable_kv_cache_events)
        # Blocks hold the pool weakly: a pool must not be kept alive by blocks
        # that another pool's caller still holds.
        self._weak_self = PoolRef(self, null=False)
        self.blocks: list[KVCacheBlock] = [
            KVCacheBlock(i, self._weak_self) for i in range(num_gpu_blocks)
        ]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        # The lookup's fast path reads group 0's table directly (it is never replaced).
        self._group0 = self.cached_block_hash_to_block.group0
        # Extra keys per block id; an entry exists only while the set is non-empty.
        self.cached_block_hashes_by_block: dict[int, set[bytes]] = {}
        # Block 0 leaves the free queue for good (invariant 5).
        self.null_block = self.free_block_queue.popleft()
        self.null_block.pool = PoolRef(self, null=True)
        self.kv_event_queue: list[KVCacheEvent] = []
        self._reuse_watchers: dict[int, ReuseWatcher] = {}

    # ------------------------------------------------------------- allocation

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Hand out ``num_blocks`` blocks from the front of the free queue, in order.

        Pre: ``0 <= num_blocks <= free count`` (rule ``get-new-blocks-count``).
        Post: each block's reuse watcher fired and dropped, its keys removed
        (one ``BlockRemoved`` per key), ``ref_cnt == 1``.
        """
        queue = self.free_block_queue
        if not (type(num_blocks) is int or _is_int(num_blocks)) or not (
            0 <= num_blocks <= queue.num_free_blocks
        ):
            raise BlockPoolError(
                "get_new_blocks",
                "get-new-blocks-count",
                f"cannot get {num_blocks!r} blocks: {queue.num_free_blocks} are free",
            )
        ret = queue.popleft_n(num_blocks)
        watchers = self._reuse_watchers
        if watchers:
            for blk in ret:
                watcher = watchers.pop(blk.block_id, None)
                if watcher is not None:
                    watcher(blk)
                if blk._key_hash is not None:
                    self._remove_all_keys(blk)
                blk.ref_cnt = 1
            return ret
        for blk in ret:
            # Invariant 6: a block changes hands without any key. (Keys only
            # exist when caching is on.)
            if blk._key_hash is not None:
                self._remove_all_keys(blk)
            blk.ref_cnt = 1
        return ret

    def free_blocks(
        self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False
    ) -> None:
        """Release one hold per listed occurrence (a multiset), first = evicted first.

        Pre: no block is listed more times than it is held (rule ``free-held``);
        blocks of another live pool are handed to that pool (rule
        ``foreign-route`` when there is none). Null blocks are skipped.
        Post: blocks reaching 0 go to the front, in the given order and ahead of
        the old front, if they have no key, caching is off, or ``evict_first``;
        otherwise to the back in the given order.
        """
        blocks = ordered_blocks if type(ordered_blocks) is list else _as_sequence(ordered_blocks)
        mine = self._weak_self
        keep_cached = self.enable_caching and not evict_first
        to_front: list[KVCacheBlock] = []
        to_back: list[KVCacheBlock] = []
        # One pass: each block is checked as it is released. The first block this pass
        # cannot take (another pool's, or released once more than it is held) stops it.
        walk = iter(blocks)
        done = False
        error: Exception | None = None
        try:
            for blk in walk:
                if blk.pool is not mine:
                    if blk.is_null:
                        continue
                    break  # another pool's block, or no block at all
                rc = blk.ref_cnt - 1
                if rc < 0:
                    break
                blk.ref_cnt = rc
                if rc == 0:
                    # Unkeyed blocks are worthless to the cache: reuse them first.
                    if blk._key_hash is None or not keep_cached:
                        to_front.append(blk)
                    else:
                        to_back.append(blk)
            else:
                done = True
        except Exception as exc:  # a malformed block: the careful path says what is wrong
            error = exc
        if done:
            # Invariant 1: every block that reached 0 enters the queue exactly once.
            if to_front:
                self.free_block_queue.prepend_n(to_front)
            if to_back:
                self.free_block_queue.append_n(to_back)
            return
        # Stopped at position ``stop``: give back what the pass took, then check it all.
        stop = len(blocks) - length_hint(walk) - 1
        for blk in blocks[:stop]:
            if blk.pool is mine:
                blk.ref_cnt += 1
        self._free_blocks_checked(blocks, evict_first, error)

    def _free_blocks_checked(
        self, blocks: Sequence[KVCacheBlock], evict_first: bool, error: Exception | None
    ) -> None:
        """``free_blocks`` for a call the one-pass release stopped on: check every block
        first (refusing with the rule it breaks), then release this pool's blocks and hand
        the others to their pools."""
        self._validate_releases(blocks, "free_blocks", "free-held", route=True)
        own = self.blocks
        mine: list[KVCacheBlock] = []
        foreign: dict[BlockPool, list[KVCacheBlock]] = {}
        for blk in blocks:
            if blk.is_null:
                continue
            bid = blk.block_id
            if 0 <= bid < self.num_gpu_blocks and own[bid] is blk:
                mine.append(blk)
            else:
                foreign.setdefault(self._route_target(blk, "free_blocks"), []).append(blk)
        if not foreign:
            # The checks accept what the pass stopped on: only an exception does that.
            raise error if error is not None else AssertionError("free_blocks stopped for no rule")
        self.free_blocks(mine, evict_first=evict_first)  # all held, all ours: one pass
        for pool, pool_blocks in foreign.items():
            pool.free_blocks(pool_blocks, evict_first=evict_first)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take one more hold on each listed occurrence (cache hits).

        Pre: a free block (``ref_cnt == 0``) has a key (rule ``touch-identity``);
        blocks are this pool's (rule ``foreign-block``). Null blocks are skipped.
        Post: free blocks leave the queue; ``ref_cnt += 1`` per occurrence.
        """
        seq = blocks if type(blocks) is list else _as_sequence(blocks)
        mine = self._weak_self
        # Free blocks this call takes out of the queue (each once: its first occurrence
        # finds ref_cnt 0). One pass: each block is checked as it is taken; the first one
        # that cannot be taken stops the pass, which is then undone.
        taken: list[KVCacheBlock] = []
        walk = iter(seq)
        done = False
        error: Exception | None = None
        try:
            for blk in walk:
                if blk.pool is not mine:
                    if blk.is_null:
                        continue
                    break  # another pool's block, or no block at all
                rc = blk.ref_cnt
                if rc == 0:
                    if blk._key_hash is None:
                        break  # a free block without a key is no cache hit
                    # Invariant 1: held blocks are not free. The block is spliced out of
                    # the queue here (the queue's remove, without a call per block); it
                    # keeps its own links until the pass is through.
                    before = blk.prev_free_block
                    after = blk.next_free_block
                    before.next_free_block = after  # type: ignore[union-attr]
                    after.prev_free_block = before  # type: ignore[union-attr]
                    taken.append(blk)
                blk.ref_cnt = rc + 1
            else:
                done = True
        except Exception as exc:  # a malformed block: the checks below say what is wrong
            error = exc
        if done:
            if taken:
                self.free_block_queue.finish_removals(taken)
            return
        # Stopped at position ``stop``: put back what the pass took, then say why.
        stop = len(seq) - length_hint(walk) - 1
        self.free_block_queue.undo_removals(taken)
        for blk in seq[:stop]:
            if blk.pool is mine:
                blk.ref_cnt -= 1
        self._check_touch(seq)
        raise error if error is not None else AssertionError("touch stopped for no rule")

    def _check_touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Refuse a ``touch`` of another pool's block or of a free block without a key."""
        for blk in blocks:
            if blk.is_null:
                continue
            self._check_own(blk, "touch")
            if blk.ref_cnt == 0 and blk._key_hash is None:
                raise BlockPoolError(
                    "touch",
                    "touch-identity",
                    "a free block without a key is not a cache hit",
                    blk.block_id,
                )

    def unpin_blocks(self, blocks: Iterable[KVCacheBlock], on_reuse: ReuseWatcher) -> None:
        """Release one hold per occurrence; the blocks stay readable until reused.

        Pre: not null (rule ``null-unpin``), held at least as many times as
        listed (rule ``unpin-held``). Post: ``on_reuse`` is each block's reuse
        watcher (replacing an older one); blocks reaching 0 go to the back, in
        the order they reach 0, whatever their key.
        """
        seq = _as_sequence(blocks)
        for blk in seq:
            if blk.is_null:
                raise BlockPoolError(
                    "unpin_blocks", "null-unpin", "the null block cannot be unpinned", blk.block_id
                )
        self._validate_releases(seq, "unpin_blocks", "unpin-held", route=False)
        released: list[KVCacheBlock] = []
        watchers = self._reuse_watchers
        for blk in seq:
            blk.ref_cnt -= 1
            watchers[blk.block_id] = on_reuse
            if blk.ref_cnt == 0:
                released.append(blk)
        self.free_block_queue.append_n(released)

    # ---------------------------------------------------------------- caching

    def cache_full_blocks(
        self,
        request: RequestLike,
        blocks: Sequence[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        kv_cache_group_id: int,
        block_mask: Sequence[bool] | None = None,
    ) -> None:
        """Register ``blocks[num_cached_blocks:num_full_blocks]`` under the request's hashes.

        Block ``j`` (null and masked-out blocks skipped) gets the key of the
        request's chained hash over its first ``(j + 1) * block_size`` tokens.
        A block that already has a key must be a partial entry being promoted
        (it covers fewer tokens): its old keys are removed first. With events
        on, one ``BlockStored`` is emitted for the call.
        """
        op = "cache_full_blocks"
        self._check_caching(op)
        hbs = self.hash_block_size
        if type(block_size) is int and block_size > 0 and block_size % hbs == 0:
            ratio = block_size // hbs
        else:
            ratio = self._check_block_size(op, block_size)
        group = kv_cache_group_id
        if type(group) is not int or not 0 <= group < _U32_LIMIT:
            self._check_group(op, group)
        if not (
            _is_int(num_cached_blocks)
            and _is_int(num_full_blocks)
            and 0 <= num_cached_blocks <= num_full_blocks <= len(blocks)
        ):
            raise BlockPoolError(
                op,
                "cache-range",
                f"need 0 <= num_cached_blocks ({num_cached_blocks!r}) <= num_full_blocks "
                f"({num_full_blocks!r}) <= len(blocks) ({len(blocks)})",
            )
        if block_mask is not None and len(block_mask) != num_full_blocks - num_cached_blocks:
            raise BlockPoolError(
                op,
                "cache-range",
                f"block_mask has {len(block_mask)} entries for "
                f"{num_full_blocks - num_cached_blocks} blocks",
            )
        hashes = request.block_hashes
        if len(hashes) * hbs // block_size < num_full_blocks:
            raise BlockPoolError(
                op,
                "hashes-available",
                f"{len(hashes)} hashes of {hbs} tokens do not cover "
                f"{num_full_blocks} blocks of {block_size}",
            )
        if num_cached_blocks >= num_full_blocks:
            return
        self._check_cacheable(blocks, num_cached_blocks, num_full_blocks, block_size, block_mask)

        events_on = self.enable_kv_cache_events
        stored: list[bytes] = []
        table = self.cached_block_hash_to_block
        group_table = table.by_group.get(group)
        if group_table is None:
            group_table = table.by_group[group] = {}
        mine = self._weak_self  # checked above: every block but the null block links here
        for j in range(num_cached_blocks, num_full_blocks):
            blk = blocks[j]
            if blk.pool is not mine or (
                block_mask is not None and not block_mask[j - num_cached_blocks]
            ):
                continue
            block_hash = hashes[(j + 1) * ratio - 1]
            if blk._key_hash is not None:
                self._remove_all_keys(blk)  # partial -> full promotion
            # Invariant 3: primary key and map entry are made together.
            blk._key_hash = block_hash
            blk._key_group = group
            blk._block_hash_num_tokens = (j + 1) * block_size
            if block_hash in group_table:
                table.add(block_hash, group, blk)  # a duplicate joins the key's blocks
            else:
                group_table[block_hash] = blk
            if events_on:
                stored.append(block_hash)
        if events_on:
            parent = hashes[num_cached_blocks * ratio - 1] if num_cached_blocks > 0 else None
            lora = request.lora_request
            self.kv_event_queue.append(
                BlockStored(
                    block_hashes=stored,
                    parent_block_hash=parent,
                    token_ids=list(
                        request.all_token_ids[
                            num_cached_blocks * block_size : num_full_blocks * block_size
                        ]
                    ),
                    block_size=block_size,
                    lora_id=None if lora is None else lora.adapter_id,
                    medium=_MEDIUM,
                    lora_name=None if lora is None else lora.name,
                    group_idx=group,
                )
            )

    def emit_cached_block_events(
        self,
        request: RequestLike,
        num_cached_blocks: int,
        block_size: int,
        kv_cache_group_id: int,
    ) -> None:
        """Publish again the request's first ``num_cached_blocks`` blocks (a prefix-cache
        hit of a request in the ``"full"`` report mode): one ``BlockStored`` naming their
        hashes at ``block_size``, with no parent. Nothing in the pool changes."""
        if not self.enable_kv_cache_events or num_cached_blocks == 0:
            return
        ratio = block_size // self.hash_block_size
        hashes = request.block_hashes
        lora = request.lora_request
        self.kv_event_queue.append(
            BlockStored(
                block_hashes=[hashes[(j + 1) * ratio - 1] for j in range(num_cached_blocks)],
                parent_block_hash=None,
                token_ids=list(request.all_token_ids[: num_cached_blocks * block_size]),
                block_size=block_size,
                lora_id=None if lora is None else lora.adapter_id,
                medium=_MEDIUM,
                lora_name=None if lora is None else lora.name,
                group_idx=kv_cache_group_id,
            )
        )

    def _check_cacheable(
        self,
        blocks: Sequence[KVCacheBlock],
        start: int,
        stop: int,
        block_size: int,
        block_mask: Sequence[bool] | None,
    ) -> None:
        """Refuse ``cache_full_blocks`` unless ``blocks[start:stop]`` (null and masked-out
        blocks aside) are this pool's, held, listed once, and either keyless or partial
        entries covering fewer tokens than their new key."""
        op = "cache_full_blocks"
        mine = self._weak_self
        span = blocks[start:stop]
        # Distinct objects (the common call) need no duplicate bookkeeping; otherwise only
        # the blocks that count are tracked (the null block may be listed many times).
        seen: set[int] | None = set()
        try:
            if len(set(span)) == len(span):
                seen = None
        except TypeError:  # unhashable junk: the checks below name it
            pass
        for j in range(start, stop):
            blk = blocks[j]
            if block_mask is not None and not block_mask[j - start]:
                continue
            if blk.pool is not mine:
                if blk.is_null:
                    continue
                self._check_own(blk, op)  # raises: another pool's block
            bid = blk.block_id
            if blk.ref_cnt < 1:
                raise BlockPoolError(op, "cache-held", "only a held block can be cached", bid)
            if seen is not None:
                if bid in seen:
                    raise BlockPoolError(op, "cache-distinct", "the block is listed twice", bid)
                seen.add(bid)
            covered = blk._block_hash_num_tokens
            if (
                blk._key_hash is not None
                and covered is not None
                and covered >= (j + 1) * block_size
            ):
                raise BlockPoolError(
                    op,
                    "cache-fresh",
                    f"the block already has a key covering {covered} tokens "
                    f"(only a partial entry may be promoted to {(j + 1) * block_size})",
                    bid,
                )

    def cache_partial_block(
        self,
        request: RequestLike,
        block: KVCacheBlock,
        num_tokens: int,
        kv_cache_group_id: int,
        block_size: int,
        replace_existing_hashes: bool = False,
    ) -> bytes | None:
        """Register ``block`` under the request's chained hash at ``num_tokens``.

        The key becomes the primary one if the block has none, else an extra
        key; a primary covering fewer tokens (or, with
        ``replace_existing_hashes``, every key) is dropped first. Returns the
        key, or ``None`` for the null block (which is left alone).
        """
        mine = self._weak_self
        if block.pool is not mine and block.is_null:
            return None
        op = "cache_partial_block"
        self._check_caching(op)
        hbs = self.hash_block_size
        # Each check as a plain test first; the full check (which raises) only when it fails.
        if not (type(block_size) is int and block_size > 0 and block_size % hbs == 0):
            self._check_block_size(op, block_size)
        group = kv_cache_group_id
        if not (type(group) is int and 0 <= group < _U32_LIMIT):
            self._check_group(op, group)
        if block.pool is not mine:
            self._check_own(block, op)
        bid = block.block_id
        if block.ref_cnt < 1:
            raise BlockPoolError(op, "cache-held", "only a held block can be cached", bid)
        if not _is_int(num_tokens) or num_tokens <= 0 or num_tokens % hbs != 0:
            raise BlockPoolError(
                op,
                "partial-tokens",
                f"num_tokens must be a positive multiple of {hbs}, got {num_tokens!r}",
                bid,
            )
        hashes = request.block_hashes
        nhb = num_tokens // hbs
        if nhb > len(hashes):
            raise BlockPoolError(
                op,
                "hashes-available",
                f"{num_tokens} tokens need {nhb} hashes, the request has {len(hashes)}",
                bid,
            )
        block_hash = hashes[nhb - 1]
        table = self.cached_block_hash_to_block
        already = (block._key_group == group and block._key_hash == block_hash) or table.holds(
            block_hash, group, bid
        )
        if replace_existing_hashes:
            self._remove_all_keys(block)
            already = False
        elif not already:
            covered = block._block_hash_num_tokens
            if covered is not None and covered < num_tokens:
                self._remove_all_keys(block)  # a shorter prefix entry is superseded
        if not already:  # (a removal above took every key of the block: none is there)
            self._insert_key(block, block_hash, group, num_tokens)
        if self.enable_kv_cache_events and not already:
            lora = request.lora_request
            # the event covers the entry's block from its start: its parent, the block
            # before, is a hash subscribers were told of
            start = (num_tokens - 1) // block_size * block_size
            self.kv_event_queue.append(
                BlockStored(
                    block_hashes=[block_hash],
                    parent_block_hash=hashes[start // hbs - 1] if start > 0 else None,
                    token_ids=list(request.all_token_ids[start:num_tokens]),
                    block_size=num_tokens - start,
                    lora_id=None if lora is None else lora.adapter_id,
                    medium=_MEDIUM,
                    lora_name=None if lora is None else lora.name,
                    group_idx=group,
                )
            )
        return block_hash + group_suffix(group)

    def get_cached_block(
        self, block_hash: bytes, kv_cache_group_ids: Iterable[int]
    ) -> list[KVCacheBlock] | None:
        """One block per group (the earliest cached under hash + group), or ``None`` if any
        group misses (all or nothing). Every group id is checked before any lookup."""
        if type(kv_cache_group_ids) is list and len(kv_cache_group_ids) == 1:
            # The common call: a model with one KV cache group, id 0.
            group = kv_cache_group_ids[0]
            if group == 0 and type(group) is int:
                blk = self._group0.get(block_hash)
                if blk is None:
                    return None
                if type(blk) is not KVCacheBlock:  # several blocks under the key
                    blk = self.cached_block_hash_to_block.first(block_hash, 0)
                return [blk]  # type: ignore[list-item]
        return self._get_cached_blocks(block_hash, kv_cache_group_ids)

    def get_cached_prefix(self, block_hashes: Iterable[bytes], group: int) -> list[KVCacheBlock]:
        """The earliest block cached under each hash in ``group``, in order, up to the first
        hash with none: ``get_cached_block(hash, [group])`` hash by hash until it misses,
        the lookups made in C. Only lookups; the group id is checked first."""
        if type(group) is not int or not 0 <= group < _U32_LIMIT:
            self._check_group("get_cached_prefix", group)
        table = self.cached_block_hash_to_block.by_group.get(group)
        if table is None:
            return []
        found: list[Any] = list(takewhile(_is_entry, map(table.get, block_hashes)))
        if countOf(map(type, found), KVCacheBlock) != len(found):
            # A key several blocks hold maps to them by id, the earliest first.
            found = [e if type(e) is KVCacheBlock else next(iter(e.values())) for e in found]
        return found

    def _get_cached_blocks(
        self, block_hash: bytes, kv_cache_group_ids: Iterable[int]
    ) -> list[KVCacheBlock] | None:
        """``get_cached_block`` for any groups: check them all, then look each up."""
        groups = (
            kv_cache_group_ids
            if type(kv_cache_group_ids) is list or type(kv_cache_group_ids) is tuple
            else list(kv_cache_group_ids)
        )
        for group in groups:
            # A plain int in range passes without a call; anything else takes the full
            # check, which raises for what it refuses.
            if type(group) is not int or not 0 <= group < _U32_LIMIT:
                self._check_group("get_cached_block", group)
        table = self.cached_block_hash_to_block
        out: list[KVCacheBlock] = []
        for group in groups:
            blk = table.first(block_hash, group)
            if blk is None:
                return None
            out.append(blk)
        return out

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        """Strip every key of the given blocks (one ``BlockRemoved`` per key).

        Pre: ids are ints in ``[0, num_gpu_blocks)`` (rule ``block-id-range``).
        The blocks are not freed, not moved in the queue, their watchers not fired.
        """
        ids = list(block_ids)
        for bid in ids:
            if not _is_int(bid) or not 0 <= bid < self.num_gpu_blocks:
                raise BlockPoolError(
                    "evict_blocks",
                    "block-id-range",
                    f"block id {bid!r} is not in [0, {self.num_gpu_blocks})",
                    bid if _is_int(bid) else None,
                )
        for bid in ids:
            blk = self.blocks[bid]
            if blk._key_hash is not None:
                self._remove_all_keys(blk)

    def move_block_hashes(self, src_block: KVCacheBlock, dst_block: KVCacheBlock) -> None:
        """Re-point every key of ``src_block`` to ``dst_block`` (copy-on-write).

        Pre: both are this pool's; ``dst_block`` is not null (rule
        ``move-null``) and has no key (rule ``move-dst-unkeyed``). Post: the
        first key (src's primary) is dst's primary with src's token count, the
        rest are extras; each entry now sits last among its key's duplicates;
        ``src_block`` has no key. Entries never vanish; no events.
        """
        op = "move_block_hashes"
        mine = self._weak_self
        if src_block.pool is not mine:
            self._check_own(src_block, op)
        if dst_block.pool is not mine:
            self._check_own(dst_block, op)
        if dst_block.is_null:
            raise BlockPoolError(
                op, "move-null", "the null block cannot hold keys", dst_block.block_id
            )
        dst_id = dst_block.block_id
        if dst_block._key_hash is not None or dst_id in self.cached_block_hashes_by_block:
            raise BlockPoolError(
                op, "move-dst-unkeyed", "the destination already has a key", dst_id
            )
        primary = src_block._key_hash
        group = src_block._key_group
        num_tokens = src_block._block_hash_num_tokens
        if primary is None or num_tokens is None:
            return
        table = self.cached_block_hash_to_block
        src_id = src_block.block_id
        extras = self.cached_block_hashes_by_block.pop(src_id, None)
        table.discard(primary, group, src_block)
        src_block.reset_hash()
        dst_block.set_key(primary, group, num_tokens)
        table.add(primary, group, dst_block)
        if extras:
            for key in extras:
                table.pop(key, src_id)
                table.insert(key, dst_block)
            self.cached_block_hashes_by_block[dst_id] = extras

    def reset_prefix_cache(self) -> bool:
        """Drop the whole prefix cache if no block is held.

        Returns ``False`` and changes nothing when a non-null block is held.
        Otherwise clears every key, fires and drops every reuse watcher, emits
        ``AllBlocksCleared`` and returns ``True``. The free queue order is kept.
        """
        if self.free_block_queue.num_free_blocks != self.num_gpu_blocks - 1:
            return False
        self.cached_block_hash_to_block.clear()
        self.cached_block_hashes_by_block.clear()
        for blk in self.blocks:
            blk.reset_hash()
        pending = list(self._reuse_watchers.items())
        self._reuse_watchers.clear()
        for bid, watcher in pending:
            watcher(self.blocks[bid])
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True

    # ------------------------------------------------------------------ reads

    def is_block_writable(self, block: KVCacheBlock) -> bool:
        """Whether the sole holder may write ``block``: not null, one hold, no key."""
        if block.pool is not self._weak_self:
            self._check_own(block, "is_block_writable")  # raises unless it is the null block
            return not block.is_null and block.ref_cnt == 1 and block._key_hash is None
        return block.ref_cnt == 1 and block._key_hash is None

    def get_num_free_blocks(self) -> int:
        """The free-queue length (cached free blocks count as free)."""
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """The held fraction of the usable blocks: ``1 - free / (N - 1)``; 0.0 when ``N == 1``."""
        usable = self.num_gpu_blocks - 1
        if usable == 0:
            return 0.0
        return 1.0 - self.free_block_queue.num_free_blocks / usable

    def take_events(self) -> list[KVCacheEvent]:
        """Return the recorded events and clear them (always ``[]`` with events off)."""
        events = self.kv_event_queue
        self.kv_event_queue = []
        return events

    # ---------------------------------------------------------------- helpers

    def _check_own(self, block: KVCacheBlock, op: str) -> None:
        bid = block.block_id
        if not _is_int(bid) or not 0 <= bid < self.num_gpu_blocks:
            raise BlockPoolError(
                op,
                "block-id-range",
                f"block id {bid!r} is not in [0, {self.num_gpu_blocks})",
                bid if _is_int(bid) else None,
            )
        if self.blocks[bid] is not block:
            raise BlockPoolError(op, "foreign-block", "the block belongs to another pool", bid)

    def _check_caching(self, op: str) -> None:
        if not self.enable_caching:
            raise BlockPoolError(op, "caching-enabled", "prefix caching is off in this pool")

    def _check_block_size(self, op: str, block_size: int) -> int:
        """Validate ``block_size``; return how many hash blocks make one block."""
        hbs = self.hash_block_size
        if not _is_int(block_size) or block_size <= 0 or block_size % hbs != 0:
            raise BlockPoolError(
                op,
                "block-size-multiple",
                f"block_size must be a positive multiple of hash_block_size {hbs}, "
                f"got {block_size!r}",
            )
        return block_size // hbs

    def _check_group(self, op: str, group: int) -> None:
        if not _is_int(group) or not 0 <= group < _U32_LIMIT:
            raise BlockPoolError(
                op, "group-id-range", f"group id {group!r} does not fit in 4 unsigned bytes"
            )

    def _route_target(self, block: KVCacheBlock, op: str) -> BlockPool:
        """The live pool, other than this one, that owns ``block`` (rule ``foreign-route``)."""
        ref = block.pool
        pool = None if ref is None else ref()
        bid = block.block_id
        if not isinstance(pool, BlockPool) or pool is self:
            raise BlockPoolError(
                op, "foreign-route", "the block is not this pool's and has no live owner", bid
            )
        if not (_is_int(bid) and 0 <= bid < pool.num_gpu_blocks and pool.blocks[bid] is block):
            raise BlockPoolError(op, "foreign-route", "the block's pool does not own it", bid)
        return pool

    def _validate_releases(
        self, blocks: Sequence[KVCacheBlock], op: str, rule: str, route: bool
    ) -> None:
        """Refuse if any block is released more times than it is held.

        Occurrences are counted in a dict only when some block is listed twice (the
        common call lists each block once: a C-level set build tells).
        """
        own = self.blocks
        n = self.num_gpu_blocks
        counts: dict[KVCacheBlock, int] | None = None if len(set(blocks)) == len(blocks) else {}
        for blk in blocks:
            if not blk.is_null:
                bid = blk.block_id
                if not (0 <= bid < n and own[bid] is blk):
                    if route:
                        self._route_target(blk, op)
                    else:
                        self._check_own(blk, op)
                if counts is None:
                    pending = 1
                else:
                    pending = counts.get(blk, 0) + 1
                    counts[blk] = pending
                if pending > blk.ref_cnt:
                    raise BlockPoolError(
                        op,
                        rule,
                        f"block {bid} is released {self._count(blocks, blk)} times in this "
                        f"call but held {blk.ref_cnt} time(s)",
                        bid,
                    )

    @staticmethod
    def _count(blocks: Sequence[KVCacheBlock], block: KVCacheBlock) -> int:
        # Error path only: the full multiplicity, for the message.
        return sum(1 for b in blocks if b is block)

    def _insert_key(
        self, block: KVCacheBlock, block_hash: bytes, group: int, num_tokens: int
    ) -> None:
        """Add the key ``block_hash`` + ``group`` to ``block``: as its primary if it has
        none, else as an extra."""
        if block._key_hash is None:
            block.set_key(block_hash, group, num_tokens)
        else:
            self.cached_block_hashes_by_block.setdefault(block.block_id, set()).add(
                block_hash + group_suffix(group)
            )
        self.cached_block_hash_to_block.add(block_hash, group, block)  # invariant 3

    def _remove_all_keys(self, block: KVCacheBlock) -> None:
        """Strip the primary and every extra key of ``block`` (a ``BlockRemoved`` each)."""
        primary = block._key_hash
        if primary is None:
            return
        group = block._key_group
        table = self.cached_block_hash_to_block
        group0 = self._group0
        if group == 0 and group0.get(primary) is block:
            del group0[primary]  # the common entry: the key's only block, in group 0
        else:
            table.discard(primary, group, block)
        block._key_hash = block._block_hash_num_tokens = None  # reset_hash, without a call
        extras = None
        if self.cached_block_hashes_by_block:  # extra keys are rare: skip the id lookup
            bid = block.block_id
            extras = self.cached_block_hashes_by_block.pop(bid, None)
        if self.enable_kv_cache_events:
            self._emit_removed(primary, group)
        if extras:
            for key in extras:
                table.pop(key, bid)
                if self.enable_kv_cache_events:
                    self._emit_removed(get_block_hash(key), get_group_id(key))

    def _emit_removed(self, block_hash: bytes, group: int) -> None:
        self.kv_event_queue.append(
            BlockRemoved(block_hashes=[block_hash], medium=_MEDIUM, group_idx=group)
        )
