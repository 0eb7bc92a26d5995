"""Every pool operation as a small frozen value.

Blocks are named by id and keys by bytes, never by object, so an action can be printed,
stored in a trace, replayed against another pool and compared. A request is represented
only by what the pool reads off it: its chained ``block_hashes`` at ``hash_block_size``
granularity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Action:
    """Base of every action; ``operation`` is the pool method it stands for."""

    operation: ClassVar[str] = ""


@dataclass(frozen=True)
class GetNewBlocks(Action):
    """``get_new_blocks(num_blocks)``: hand out blocks from the front of the free queue."""

    operation: ClassVar[str] = "get_new_blocks"
    #: How many blocks to hand out.
    num_blocks: int


@dataclass(frozen=True)
class FreeBlocks(Action):
    """``free_blocks(blocks, evict_first)``, in eviction priority order (first = evicted first).

    ``foreign`` are blocks owned by the peer pool, listed in the same call; this pool hands
    them to their owner.
    """

    operation: ClassVar[str] = "free_blocks"
    #: Ids of this pool's blocks to release, in eviction priority order; one id may be listed
    #: several times.
    blocks: tuple[int, ...]
    #: Send blocks reaching a count of 0 to the front of the free queue even when they carry a key.
    evict_first: bool = False
    #: Ids of the peer pool's blocks listed in the same call, handed to the peer (a pool's blocks
    #: may come back through another pool's ``free_blocks``).
    foreign: tuple[int, ...] = ()


@dataclass(frozen=True)
class Touch(Action):
    """``touch(blocks)``: take one more reference on each cache hit."""

    operation: ClassVar[str] = "touch"
    #: Ids of the cache hits to take a reference on; one id may be listed several times.
    blocks: tuple[int, ...]


@dataclass(frozen=True)
class UnpinBlocks(Action):
    """``unpin_blocks(blocks, on_reuse)``: release, but keep readable until reused.

    ``watcher`` names the ``on_reuse`` callback; its firings are observed by name.
    """

    operation: ClassVar[str] = "unpin_blocks"
    #: Ids of held blocks to release while their contents are still read.
    blocks: tuple[int, ...]
    #: The name of the ``on_reuse`` callback; its firings are observed by this name.
    watcher: str


@dataclass(frozen=True)
class CacheFullBlocks(Action):
    """``cache_full_blocks(request, blocks, num_cached_blocks, num_full_blocks, ...)``."""

    operation: ClassVar[str] = "cache_full_blocks"
    #: The request's chained block hashes, one per ``hash_block_size`` tokens, without the group
    #: suffix.
    block_hashes: tuple[bytes, ...]
    #: The request's block table, as block ids.
    blocks: tuple[int, ...]
    #: How many leading blocks of the table are already cached.
    num_cached_blocks: int
    #: How many leading blocks are full: those from ``num_cached_blocks`` up to this are cached.
    num_full_blocks: int
    #: Tokens per block, a multiple of the pool's ``hash_block_size``.
    block_size: int
    #: The KV-cache group; its id is appended to each hash to make the key.
    group_id: int = 0
    #: One flag per block of the table; a block flagged false is not cached (``None``: every
    #: block).
    block_mask: tuple[bool, ...] | None = None


@dataclass(frozen=True)
class CachePartialBlock(Action):
    """``cache_partial_block(request, block, num_tokens, group, block_size, replace)``."""

    operation: ClassVar[str] = "cache_partial_block"
    #: The request's chained block hashes, as for ``CacheFullBlocks``.
    block_hashes: tuple[bytes, ...]
    #: The id of the block holding the request's partial tail.
    block: int
    #: How many prefix tokens the entry covers: a positive multiple of ``hash_block_size``.
    num_tokens: int
    #: The KV-cache group of the key.
    group_id: int
    #: Tokens per block.
    block_size: int
    #: Drop the block's older partial keys before registering this one.
    replace_existing_hashes: bool = False


@dataclass(frozen=True)
class GetCachedBlock(Action):
    """``get_cached_block(block_hash, group_ids)``: one block per group, or none at all."""

    operation: ClassVar[str] = "get_cached_block"
    #: The block hash to look up, without the group suffix.
    block_hash: bytes
    #: The groups to look in; every one must hit.
    group_ids: tuple[int, ...]


@dataclass(frozen=True)
class EvictBlocks(Action):
    """``evict_blocks(block_ids)``: strip the keys of these blocks, free nothing."""

    operation: ClassVar[str] = "evict_blocks"
    #: Ids of the blocks whose keys to strip.
    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class MoveBlockHashes(Action):
    """``move_block_hashes(src, dst)``: re-point every key of ``src`` to ``dst``."""

    operation: ClassVar[str] = "move_block_hashes"
    #: The id of the block whose keys move.
    src: int
    #: The id of the block (without keys) that takes them.
    dst: int


@dataclass(frozen=True)
class ResetPrefixCache(Action):
    """``reset_prefix_cache()``: forget every key, if no block is held."""

    operation: ClassVar[str] = "reset_prefix_cache"


@dataclass(frozen=True)
class IsBlockWritable(Action):
    """``is_block_writable(block)``: may its sole owner write it in place?"""

    operation: ClassVar[str] = "is_block_writable"
    #: The id of the block asked about (the null block included).
    block: int


@dataclass(frozen=True)
class GetUsage(Action):
    """``get_usage()``: the fraction of real blocks not in the free queue."""

    operation: ClassVar[str] = "get_usage"


@dataclass(frozen=True)
class GetNumFreeBlocks(Action):
    """``get_num_free_blocks()``: the free queue's length."""

    operation: ClassVar[str] = "get_num_free_blocks"


@dataclass(frozen=True)
class TakeEvents(Action):
    """``take_events()``: return and clear the pending KV events."""

    operation: ClassVar[str] = "take_events"


@dataclass(frozen=True)
class PeerGetNewBlocks(Action):
    """``get_new_blocks(num_blocks)`` on the peer pool, whose blocks ``FreeBlocks`` may route."""

    operation: ClassVar[str] = "peer_get_new_blocks"
    #: How many blocks to hand out from the peer pool.
    num_blocks: int


ALL_ACTIONS: tuple[type[Action], ...] = (
    GetNewBlocks,
    FreeBlocks,
    Touch,
    UnpinBlocks,
    CacheFullBlocks,
    CachePartialBlock,
    GetCachedBlock,
    EvictBlocks,
    MoveBlockHashes,
    ResetPrefixCache,
    IsBlockWritable,
    GetUsage,
    GetNumFreeBlocks,
    TakeEvents,
    PeerGetNewBlocks,
)

ACTIONS_BY_OPERATION: dict[str, type[Action]] = {a.operation: a for a in ALL_ACTIONS}
