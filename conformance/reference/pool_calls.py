"""What a pool author implements: for each operation, the call the suite makes on a pool
with vLLM's ``BlockPool`` API (``conformance/targets/vllm_api/adapter.py``), every argument
explained with what the suite passes, and what the suite reads back.

The signatures are read from our own pool (``kvpool.impl.BlockPool``), which takes exactly
the calls the adapter makes; the explanations are written here, one per argument, and a
test fails when a method gains an argument this module does not explain.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from kvpool.impl import BlockPool


@dataclass(frozen=True)
class PoolCall:
    """The pool-facing call behind one spec operation."""

    #: The method the suite calls (``peer_get_new_blocks`` calls ``get_new_blocks`` on the
    #: peer pool).
    method: str
    #: Argument name -> what it is and what the suite passes.
    arguments: dict[str, str]
    #: What the suite does with the result.
    returns: str
    #: Where the call goes, when not to the pool under test.
    on: str = "the pool under test"


_BLOCK_OBJECTS = (
    "block objects taken from `pool.blocks` by id (the suite never builds blocks itself)"
)

POOL_CALLS: dict[str, PoolCall] = {
    "get_new_blocks": PoolCall(
        "get_new_blocks",
        {
            "num_blocks": "how many blocks to hand out: from 0 up to the free count; at the "
            "robustness level also negative counts and more than are free, which the pool "
            "must refuse (raise) without changing anything",
        },
        "a list of blocks; the suite compares their `block_id`s, in order (at the `order` "
        "level the exact blocks, at `safety` any free ones)",
    ),
    "peer_get_new_blocks": PoolCall(
        "get_new_blocks",
        {"num_blocks": "as for `get_new_blocks`, on the second pool"},
        "the peer's blocks, by `block_id`",
        on="the peer pool (a second pool the factory built, reached as `pool.peer` or "
        "through the adapter; only targets that declare one get this action)",
    ),
    "free_blocks": PoolCall(
        "free_blocks",
        {
            "ordered_blocks": f"the blocks to release, as {_BLOCK_OBJECTS}, in the order a "
            "request frees them (tail first); one block may be listed several times, and at "
            "the robustness level more often than it is held; with a peer pool, blocks of "
            "the peer may be mixed in (the pool hands those to their own pool)",
            "evict_first": "when true, blocks reaching a count of 0 go to the front of the "
            "free queue even if they carry a key; the suite passes it only to pools whose "
            "`free_blocks` takes it (vLLM 0.23 calls it `prepend`)",
        },
        "nothing; the suite then reads the free queue, the counts and the keys",
    ),
    "touch": PoolCall(
        "touch",
        {
            "blocks": f"cache hits to take a reference on, as {_BLOCK_OBJECTS}; free ones "
            "leave the free queue (vLLM before 0.14 takes one list per group: the adapter "
            "wraps them)",
        },
        "nothing",
    ),
    "unpin_blocks": PoolCall(
        "unpin_blocks",
        {
            "blocks": f"held blocks to release while their contents are still read, as "
            f"{_BLOCK_OBJECTS}",
            "on_reuse": "a callable the pool calls with the block when it hands the block out "
            "again or resets the cache; the suite records each call and compares them",
        },
        "nothing",
    ),
    "cache_full_blocks": PoolCall(
        "cache_full_blocks",
        {
            "request": "an object with `block_hashes` (a list of bytes: the request's chained "
            "hashes, one per `hash_block_size` tokens) and `all_token_ids`; it raises on any "
            "other field the pool reads that the suite cannot fill",
            "blocks": f"the request's block table, as {_BLOCK_OBJECTS}",
            "num_cached_blocks": "how many leading blocks of the table are already cached",
            "num_full_blocks": "how many leading blocks are full; blocks from "
            "`num_cached_blocks` up to this one are to be cached",
            "block_size": "tokens per block, a multiple of `hash_block_size`; a block's key "
            "is the request's last hash inside the block",
            "kv_cache_group_id": "the KV-cache group, appended to each hash as 4 big-endian "
            "bytes to make the key",
            "block_mask": "optional: one flag per block of the table; a block whose flag is "
            "false is not cached (the suite passes it only to pools that take it)",
        },
        "nothing; the suite reads every block's keys and the index afterwards, and the "
        "`BlockStored` event when events are on",
    ),
    "cache_partial_block": PoolCall(
        "cache_partial_block",
        {
            "request": "as for `cache_full_blocks`",
            "block": "the block holding the request's partial tail, from `pool.blocks`",
            "num_tokens": "how many prefix tokens the entry covers: a positive multiple of "
            "`hash_block_size` (others must be refused)",
            "kv_cache_group_id": "the KV-cache group of the key",
            "block_size": "tokens per block",
            "replace_existing_hashes": "optional (vLLM 0.30 on): drop the block's older "
            "partial keys first",
        },
        "the key registered (bytes: the hash with the group suffix), or `None` for the null block",
    ),
    "get_cached_block": PoolCall(
        "get_cached_block",
        {
            "block_hash": "a block hash without the group suffix (bytes)",
            "kv_cache_group_ids": "the groups to look in; every one must hit",
        },
        "a list of one block per group (compared by `block_id`), or `None` when any group misses",
    ),
    "evict_blocks": PoolCall(
        "evict_blocks",
        {"block_ids": "a set of block ids (ints) whose keys to strip"},
        "nothing",
    ),
    "move_block_hashes": PoolCall(
        "move_block_hashes",
        {
            "src_block": "the block whose keys move, from `pool.blocks`",
            "dst_block": "a block without keys that takes them",
        },
        "nothing",
    ),
    "reset_prefix_cache": PoolCall(
        "reset_prefix_cache", {}, "`True` when the cache was cleared, `False` when refused"
    ),
    "is_block_writable": PoolCall(
        "is_block_writable",
        {"block": "any block from `pool.blocks`, the null block included"},
        "a bool",
    ),
    "get_num_free_blocks": PoolCall("get_num_free_blocks", {}, "an int, the free count"),
    "get_usage": PoolCall("get_usage", {}, "a float between 0 and 1"),
    "take_events": PoolCall(
        "take_events",
        {},
        "the events published since the last call, oldest first, and forgets them; every "
        "field of each event is listed below, under *Events a pool publishes*",
    ),
}

#: What the suite reads from any pool between calls (``PoolView``), and where.
READ_BACK: tuple[tuple[str, str], ...] = (
    (
        "`pool.blocks`",
        "a list of the pool's blocks, indexed by block id (block 0 is the null "
        "block); the suite passes these objects back in calls",
    ),
    ("`block.block_id`", "the block's id (int)"),
    ("`block.ref_cnt`", "its reference count, compared after every step when present"),
    ("`block.block_hash`", "its primary key (bytes with the group suffix) or `None`"),
    ("`pool.cached_block_hashes_by_block`", "optional: block id -> its extra keys"),
    (
        "`pool.cached_block_hash_to_block`",
        "optional: the prefix-cache index, a dict from key to a block, a list of "
        "blocks or a dict of blocks (in lookup order), "
        "compared key by key; without it the suite probes keys through `get_cached_block`",
    ),
    (
        "`pool.free_block_queue`",
        "optional: the free queue, walked through its head and each "
        "block's `next_free_block` link (or `get_all_free_blocks()`), compared in order",
    ),
    ("`pool.get_num_free_blocks()`", "required: the free count"),
)

#: The constructor the suite calls (or a factory taking the same keywords).
CONSTRUCTOR = (
    "BlockPool(num_gpu_blocks=..., enable_caching=..., hash_block_size=..., "
    "enable_kv_cache_events=...)"
)


def signature(operation: str) -> str:
    """The call as our pool declares it, e.g. ``pool.free_blocks(ordered_blocks, ...)``."""
    call = POOL_CALLS[operation]
    declared = inspect.signature(getattr(BlockPool, call.method))
    parameters = [p for name, p in declared.parameters.items() if name != "self"]
    return f"{call.method}({', '.join(str(p) for p in parameters)}) -> {declared.return_annotation}"


def unexplained() -> list[str]:
    """``operation: argument`` for every argument our pool takes that is not explained."""
    missing = []
    for operation, call in POOL_CALLS.items():
        declared = inspect.signature(getattr(BlockPool, call.method)).parameters
        missing += [
            f"{operation}: {name}"
            for name in declared
            if name != "self" and name not in call.arguments
        ]
        missing += [
            f"{operation}: {name} (not taken)" for name in call.arguments if name not in declared
        ]
    return missing
