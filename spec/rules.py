"""The caller's contract, rule by rule.

Every out-of-contract action is refused with a :class:`~kvpool.spec.errors.ContractViolation`
naming one of these rules. The ids are stable: pools, traces and docs quote them.
"""

from __future__ import annotations

RULES: dict[str, str] = {
    "block-id-range": "a block id must be an integer in 0 .. num_gpu_blocks-1",
    "get-new-blocks-count": "get_new_blocks(n) needs 0 <= n <= the number of free blocks",
    "free-held": "a block may be freed at most as many times as it is held (ref_cnt)",
    "foreign-route": "a block of another pool can only be freed while that pool is alive",
    "evict-first-unsupported": "this profile's free_blocks has no evict_first argument",
    "touch-identity": "only a cache hit may be touched: a free block must carry a key",
    "null-unpin": "the null block can never be unpinned",
    "unpin-held": "a block may be unpinned at most as many times as it is held",
    "caching-enabled": "blocks can only be cached while prefix caching is enabled",
    "group-id-range": "a KV-cache group id must be an integer in 0 .. 2**32-1 (4 bytes)",
    "block-size-multiple": "block_size must be a positive multiple of hash_block_size",
    "cache-range": "0 <= num_cached_blocks <= num_full_blocks <= len(blocks), and the "
    "block_mask covers exactly blocks[num_cached_blocks:num_full_blocks]",
    "hashes-available": "the request must carry a block hash for every prefix it caches",
    "cache-held": "a block being cached must be held by the request (ref_cnt >= 1)",
    "cache-distinct": "a block may appear only once among the blocks being cached",
    "cache-fresh": "a block being cached as full must have no key, or a partial key that "
    "covers fewer tokens (promotion)",
    "cache-parent-keyed": "where the profile reads the BlockStored parent hash off the block "
    "before the new ones, that block must have a key",
    "partial-tokens": "num_tokens of a partial entry must be a positive multiple of "
    "hash_block_size",
    "move-null": "the null block can never receive keys",
    "move-dst-unkeyed": "move_block_hashes needs a destination block without keys",
    "unsupported-action": "the action is not part of this profile's API",
    # the request level: what a scheduler promises its KV cache manager
    "request-new": "a request is admitted once; its id must not be live",
    "request-tokens": "a request's tokens are a non-empty list of non-negative ids",
    "request-extra-keys": "a request's multimodal features lie inside its prompt and its "
    "prompt embeddings are one per prompt token",
    "request-report-mode": "a request's KV-cache report mode is 'incremental' or 'full'",
    "request-running": "only a running request can grow, compute or be preempted",
    "request-preempted": "only a preempted request can be resumed",
    "request-known": "only a live request can be finished",
    "partial-full-attention": "partial entries are registered only when every KV-cache group "
    "uses full attention",
    "evict-unheld": "only cached blocks no request holds are evicted from the prefix cache "
    "(real block ids, never the null block)",
}


#: The rules of the request level (kvpool.spec.manager); the rest are the pool's.
REQUEST_RULES = frozenset(
    {
        "request-new",
        "request-tokens",
        "request-extra-keys",
        "request-report-mode",
        "request-running",
        "request-preempted",
        "request-known",
        "partial-full-attention",
        "evict-unheld",
    }
)


def describe(rule: str) -> str:
    """The plain statement of ``rule`` (the id itself when it is unknown)."""
    return RULES.get(rule, rule)
