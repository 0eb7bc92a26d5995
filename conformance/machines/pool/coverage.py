"""Which interesting situations a run reached.

A suite that never reaches a hit on a free cached block cannot catch a pool that mishandles
one; the coverage table says what was actually exercised.
"""

from __future__ import annotations

from kvpool.spec import (
    Action,
    CacheFullBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    MoveBlockHashes,
    Observation,
    PoolState,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.caching import blocks_to_cache

#: Every situation this module can report, so a table can show the ones never reached.
SITUATIONS = (
    "duplicate key cached",
    "hit on a free cached block touched",
    "cached block evicted by allocation",
    "pool exhausted",
    "multi-group lookup missed in one group",
    "multi-group lookup hit",
    "partial entry promoted to full",
    "block with extra keys",
    "keys moved to a copy",
    "reuse watcher fired",
    "unpinned block freed to the back",
    "unkeyed block freed to the front",
    "cached block freed to the back",
    "evict_first on a cached block",
    "foreign block handed back",
    "reset refused while held",
    "reset cleared the cache",
    "events taken",
)


def situations(
    before: PoolState, action: Action, after: PoolState, observation: Observation
) -> list[str]:
    """The situations of :data:`SITUATIONS` that this step reached."""
    seen: list[str] = []
    if any(len(blocks) > 1 for blocks in after.cache.values()):
        seen.append("duplicate key cached")
    if any(after.extra):
        seen.append("block with extra keys")
    if observation.fired:
        seen.append("reuse watcher fired")
    match action:
        case Touch(blocks=blocks):
            if any(b and before.ref_cnt[b] == 0 and before.keys_of(b) for b in blocks):
                seen.append("hit on a free cached block touched")
        case GetNewBlocks(num_blocks=n):
            if any(before.keys_of(b) for b in before.free_queue[:n]):
                seen.append("cached block evicted by allocation")
            if n and not after.free_queue:
                seen.append("pool exhausted")
        case GetCachedBlock(group_ids=groups) if len(groups) > 1:
            seen.append(
                "multi-group lookup hit"
                if observation.result is not None
                else "multi-group lookup missed in one group"
            )
        case CacheFullBlocks():
            if any(before.primary[b] is not None for _, b in blocks_to_cache(action)):
                seen.append("partial entry promoted to full")
        case MoveBlockHashes(src=src):
            if before.keys_of(src):
                seen.append("keys moved to a copy")
        case UnpinBlocks():
            if len(after.free_queue) > len(before.free_queue):
                seen.append("unpinned block freed to the back")
        case FreeBlocks(blocks=blocks, evict_first=evict_first, foreign=foreign):
            freed = [b for b in blocks if b and after.ref_cnt[b] == 0]
            if before.profile.unkeyed_free_to_front and any(not before.keys_of(b) for b in freed):
                seen.append("unkeyed block freed to the front")
            if any(before.keys_of(b) for b in freed):
                seen.append(
                    "evict_first on a cached block"
                    if evict_first
                    else "cached block freed to the back"
                )
            if foreign:
                seen.append("foreign block handed back")
        case ResetPrefixCache():
            seen.append(
                "reset cleared the cache" if observation.result else "reset refused while held"
            )
        case TakeEvents():
            if observation.result:
                seen.append("events taken")
    return seen
