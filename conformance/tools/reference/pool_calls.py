"""What a pool author implements: for each operation, the call the suite makes on a pool
with vLLM's ``BlockPool`` API (``conformance/engines/vllm_api/adapter.py``), every argument
explained with what the suite passes, and what the suite reads back.

The signatures are read from our own pool (``kvpool.impl.BlockPool``), which takes exactly
the calls the adapter makes; the explanations are the operation table's
(``engine/operations.py``), one per argument, and a test fails when a method gains an
argument the table does not explain.
"""

from __future__ import annotations

import inspect

from kvpool.impl import BlockPool

from ...machines.pool import operations as table
from ...machines.pool.pool_call import PoolCall


def call_of(operation: str) -> PoolCall:
    """The operation's call, as the operation table declares it (its words for each
    argument included)."""
    return table.named(operation).call


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
    """The call as our pool declares it, e.g. ``pool.free_blocks(ordered_blocks, ...)``;
    for a method our pool lacks, as the table declares it."""
    call = call_of(operation)
    method = getattr(BlockPool, call.method, None)
    if method is None:
        return f"{call.method}({', '.join(call.explained)})"
    declared = inspect.signature(method)
    parameters = [p for name, p in declared.parameters.items() if name != "self"]
    return f"{call.method}({', '.join(str(p) for p in parameters)}) -> {declared.return_annotation}"


def unexplained() -> list[str]:
    """``operation: argument`` for every argument our pool takes that is not explained."""
    missing = []
    for op in table.POOL_OPERATIONS:
        operation, call = op.name, op.call
        declared = inspect.signature(getattr(BlockPool, call.method)).parameters
        explained = call.explained
        missing += [
            f"{operation}: {name}" for name in declared if name != "self" and name not in explained
        ]
        missing += [
            f"{operation}: {name} (not taken)" for name in explained if name not in declared
        ]
    return missing
