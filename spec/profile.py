"""Profiles: the policy knobs that real pools disagree on.

The contract (the docs' "The contract in plain words") is the ``seed`` profile (upstream
vLLM at the seed's commit).
Released pools differ in a few places (where a freed block goes, which API exists, which
inputs a caching call accepts); each such difference is one field here, so a profile is a
readable list of choices. The ``vllm-*`` profiles were measured by running each released
wheel's ``BlockPool`` (CPU only) against the spec and by reading its code; each one's
description says what it captures. A field that narrows the caller's contract makes the
spec refuse such input (a :class:`~kvpool.spec.errors.ContractViolation`) instead of
modelling what the release does with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .actions import ALL_ACTIONS
from .versions import Version, parse_version


@dataclass(frozen=True)
class Profile:
    """Where a profile's pool departs from the seed, field by field."""

    name: str
    description: str
    #: A block with no key reaching ref_cnt 0 goes to the queue's front (LIFO reuse).
    unkeyed_free_to_front: bool = True
    #: With caching off, every freed block goes to the front.
    caching_off_free_to_front: bool = True
    #: ``free_blocks`` has the ``evict_first`` argument (every freed block to the front;
    #: vLLM 0.23 calls it ``prepend``).
    has_evict_first: bool = True
    #: Operations this pool offers (by ``Action.operation``).
    operations: frozenset[str] = frozenset(a.operation for a in ALL_ACTIONS)
    #: The pool knows ``hash_block_size``; without it the request's hashes are taken at
    #: ``block_size``, so every caching call needs ``block_size == hash_block_size``.
    has_hash_block_size: bool = True
    #: A block spanning several hash blocks is keyed by the concatenation of their hashes
    #: (vLLM 0.12-0.23) instead of the last one (which already chains over the prefix).
    coarse_hash_concatenates: bool = False
    #: ``cache_full_blocks`` has the ``block_mask`` argument.
    has_block_mask: bool = True
    #: A block whose key covers fewer tokens may be cached again as a full block (partial
    #: entry promoted); without it every new full block must have no key at all.
    cache_promotes_partial: bool = True
    #: With events on, ``BlockStored``'s parent hash is read off the key of
    #: ``blocks[num_cached_blocks - 1]``, which must then have one (else the request's hash).
    parent_hash_from_block: bool = False
    #: ``cache_partial_block`` registers an entry at any hash-block boundary; without it
    #: only strictly inside a block (``block_size > hash_block_size`` and ``num_tokens`` not
    #: a multiple of ``block_size``), unless existing hashes are being replaced.
    partial_at_boundary: bool = True
    #: ``cache_partial_block`` has the ``replace_existing_hashes`` argument.
    has_replace_existing_hashes: bool = True
    #: The release does not maintain the null block's ``ref_cnt``: touching it counts up
    #: (vLLM 0.10-0.32, vllm-mlx) and freeing it counts down (vLLM 0.10-0.32). Nothing
    #: reads that count, so where it moves it is not compared; where it does not (the
    #: seed, 0.33) it must stay 0 and is compared like every other block's.
    null_ref_cnt_moves: bool = False
    #: A partial entry's ``BlockStored`` describes only the last hash block before
    #: ``num_tokens``, its parent the fine hash before it, which no event may have named
    #: (vLLM 0.24 on); else it describes the entry's block from its start, its parent the
    #: block before.
    partial_parent_fine_hash: bool = False
    #: A block holds its pool strongly (``KVCacheBlock.pool``, vLLM 0.30 on): the pool
    #: lives as long as its blocks, so a block freed through another pool always reaches
    #: its owner; with the seed's weak link the owner may be gone, and freeing such a block
    #: breaks rule ``foreign-route``.
    strong_pool_reference: bool = False
    #: The consumer model (:mod:`kvpool.spec.consumer`: ``count`` or ``set``) the release
    #: promises its KV event subscribers, ``None`` where it promises none in writing. What
    #: it promises, not what it emits: the events level measures one against the other.
    consumer_contract: str | None = "count"
    #: The request attributes its block hashes carry as extra keys, so that requests
    #: differing in one never share a block (:data:`kvpool.spec.manager.ATTRIBUTES`);
    #: measured on each release's own ``generate_block_hash_extra_keys``.
    key_attributes: frozenset[str] = frozenset(
        {"cache-salt", "lora-name", "lora-path", "mm-identifier", "mm-offset", "prompt-embeds"}
    )
    #: Where that promise is written (or why there is none).
    consumer_contract_source: str = (
        "kvpool's own contract (docs: The KV events contract): every copy of a hash is "
        "stored and removed, the counting consumer vLLM documents"
    )

    def offers(self, operation: str) -> bool:
        """Whether this profile's pool has ``operation``."""
        return operation in self.operations


SEED = Profile(
    name="seed",
    description="upstream vLLM at the seed's commit (ef9339e): evict_first, unpin_blocks, "
    "weak pool references; unkeyed frees to the front, keyed frees to the back; a partial "
    "entry's BlockStored describes its block from the start, after the block before "
    "(upstream names the fine hash before num_tokens as parent: issue 58119)",
)

#: What a release before the written contract promised its subscribers.
_UNWRITTEN = (
    "none in writing: the release's kv_events.py and block_pool.py state no consumer "
    "contract; its pool keeps one block per copy of a hash ('we don't de-duplicate the "
    "blocks in the cache') and publishes each copy's store and removal"
)

_EVERY = SEED.operations
_NEWER = frozenset(
    {
        "cache_partial_block",
        "evict_blocks",
        "move_block_hashes",
        "is_block_writable",
        "unpin_blocks",
        "peer_get_new_blocks",
    }
)

#: The request attributes each release's block hashes carry, as measured on its own
#: ``get_request_block_hasher`` (``conformance/targets/vllm/key_partitions.py``; the
#: measurement is repeated on one release per profile by ``test_key_partitions.py``).
_KEYS_0_10 = frozenset({"cache-salt", "lora-name", "mm-identifier"})
_KEYS_0_12 = _KEYS_0_10 | {"prompt-embeds"}
_KEYS_0_19 = _KEYS_0_12 | {"mm-offset"}
_KEYS_0_31 = _KEYS_0_19 | {"lora-path"}

#: vLLM 0.10.1 - 0.11: every freed block to the back; the oldest caching contract.
VLLM_0_10 = Profile(
    name="vllm-0.10",
    description="vLLM 0.10.1-0.11: every freed block goes to the back (also unkeyed and "
    "caching-off ones); no hash_block_size (block_size == hash_block_size), no block_mask, "
    "no evict_blocks; cache_full_blocks cannot re-key a keyed block; the BlockStored "
    "parent hash comes from the parent block's key; touch takes one list per group; "
    "events carry no group id; block hashes carry the salt, the LoRA adapter's id and the "
    "multimodal identifiers (not their offsets)",
    key_attributes=_KEYS_0_10,
    unkeyed_free_to_front=False,
    caching_off_free_to_front=False,
    has_evict_first=False,
    operations=_EVERY - _NEWER,
    has_hash_block_size=False,
    has_block_mask=False,
    cache_promotes_partial=False,
    parent_hash_from_block=True,
    partial_at_boundary=False,
    has_replace_existing_hashes=False,
    null_ref_cnt_moves=True,
    consumer_contract=None,
    consumer_contract_source=_UNWRITTEN,
)
VLLM_0_12 = replace(
    VLLM_0_10,
    name="vllm-0.12",
    description="vLLM 0.12: as 0.10, plus the hash_block_size constructor argument; a block "
    "spanning several hash blocks is keyed by their hashes concatenated; block hashes "
    "also carry the prompt embeddings",
    key_attributes=_KEYS_0_12,
    has_hash_block_size=True,
    coarse_hash_concatenates=True,
)
VLLM_0_13 = replace(
    VLLM_0_12,
    name="vllm-0.13",
    description="vLLM 0.13: as 0.12, plus evict_blocks",
    operations=VLLM_0_12.operations | {"evict_blocks"},
)
VLLM_0_14 = replace(
    VLLM_0_13,
    name="vllm-0.14",
    description="vLLM 0.14-0.18: every freed block to the back; cache_full_blocks takes "
    "the parent hash from the request; touch takes a flat list; "
    "evict_blocks; no block_mask; coarse keys concatenate the hash blocks' hashes",
    parent_hash_from_block=False,
)
VLLM_0_19 = replace(
    VLLM_0_14,
    name="vllm-0.19",
    description="vLLM 0.19-0.21: as 0.14, and a multimodal feature's offset in the block "
    "enters the block hash; events name their group from 0.20 on",
    key_attributes=_KEYS_0_19,
)
VLLM_0_22 = replace(
    VLLM_0_19,
    name="vllm-0.22",
    description="vLLM 0.22: as 0.19, plus cache_full_blocks's block_mask",
    has_block_mask=True,
)
VLLM_0_23 = replace(
    VLLM_0_22,
    name="vllm-0.23",
    description="vLLM 0.23: as 0.22, plus free_blocks(..., prepend=True) sending every freed "
    "block to the front in the given order (the seed's evict_first); still every other "
    "freed block to the back",
    has_evict_first=True,
)
VLLM_0_24 = replace(
    VLLM_0_22,
    name="vllm-0.24",
    description="vLLM 0.24-0.26 (and 0.28): unkeyed and caching-off frees go to the front, "
    "keyed ones to the back; no prepend/evict_first; cache_partial_block (only strictly "
    "inside a block, no replace_existing_hashes); partial entries promoted by "
    "cache_full_blocks; a coarse block is keyed by its last hash block's hash",
    unkeyed_free_to_front=True,
    caching_off_free_to_front=True,
    operations=VLLM_0_22.operations | {"cache_partial_block"},
    cache_promotes_partial=True,
    coarse_hash_concatenates=False,
    partial_parent_fine_hash=True,
)
VLLM_0_26 = replace(
    VLLM_0_24,
    name="vllm-0.26",
    description="vLLM 0.26 and 0.28: as 0.24, plus move_block_hashes",
    operations=VLLM_0_24.operations | {"move_block_hashes"},
)
VLLM_0_27 = replace(
    VLLM_0_26,
    name="vllm-0.27",
    description="vLLM 0.27.0 and 0.27.1: as 0.26, but with caching off every freed block "
    "goes to the back (unkeyed frees go to the front only with caching on)",
    caching_off_free_to_front=False,
)
VLLM_0_29 = replace(
    VLLM_0_26,
    name="vllm-0.29",
    description="vLLM 0.29: as 0.26 (caching-off frees to the front again), plus is_block_writable",
    operations=VLLM_0_26.operations | {"is_block_writable"},
)
VLLM_0_30 = replace(
    VLLM_0_29,
    name="vllm-0.30",
    description="vLLM 0.30: as 0.29, plus unpin_blocks with reuse watchers, "
    "KVCacheBlock.pool (blocks of another pool are handed back to it; the link is strong, "
    "KVCacheBlock(idx, pool=self), so a block's pool is never gone) and "
    "cache_partial_block(replace_existing_hashes=...); partial entries still only "
    "strictly inside a block unless replacing",
    operations=VLLM_0_29.operations | {"unpin_blocks", "peer_get_new_blocks"},
    has_replace_existing_hashes=True,
    strong_pool_reference=True,
    consumer_contract_source="not established: upstream's tests/v1/core/"
    "test_kv_events_contract.py (each copy of a hash stored and removed) freezes exactly the "
    "event fields of 0.30-0.32, but the wheels ship no tests, so whether this release "
    "carries it is unknown; the release's own code states no consumer contract",
)
VLLM_0_31 = replace(
    VLLM_0_30,
    name="vllm-0.31",
    description="vLLM 0.31: as 0.30, and the LoRA adapter's path enters the block hash "
    "beside its name",
    key_attributes=_KEYS_0_31,
)
VLLM_0_32 = replace(
    VLLM_0_31,
    name="vllm-0.32",
    description="vLLM 0.32: as 0.30, and cache_partial_block accepts an entry at any "
    "hash-block boundary; freeing or touching the null block still moves its ref_cnt",
    partial_at_boundary=True,
)
VLLM_0_33 = replace(
    VLLM_0_32,
    name="vllm-0.33",
    description="vLLM 0.33: as 0.32, and the null block is skipped before its ref_cnt "
    "changes; departs from the seed in three places: free_blocks has no evict_first, a "
    "partial entry's BlockStored describes only the last hash block before num_tokens "
    "(its parent the fine hash before it, as since 0.24), and blocks hold their pool "
    "strongly (as since 0.30: a block's pool is never gone)",
    null_ref_cnt_moves=False,
    consumer_contract="count",
    consumer_contract_source="count: upstream's tests/v1/core/test_kv_events_contract.py "
    "pins 'each copy of a hash is stored and removed' (and docs/features/kv_events.md "
    "describes a recorder counting residency per medium, group and hash). The test freezes "
    "the event fields of 0.30-0.32 exactly (0.33 adds lookahead_token_ids), so it was in "
    "the tree 0.33 was cut from; the wheels ship no tests to tell whether 0.30-0.32 had it",
)

#: vllm-mlx 0.6.0's ``PagedCacheManager`` (a re-implementation for Apple silicon).
VLLM_MLX = Profile(
    name="vllm-mlx",
    description="vllm-mlx 0.6.0's PagedCacheManager: every freed block to the back; no "
    "evict_first, no block_mask; cache_full_blocks cannot re-key a keyed block; no "
    "unpin/partial/evict/move/writable, no events",
    unkeyed_free_to_front=False,
    caching_off_free_to_front=False,
    has_evict_first=False,
    operations=frozenset(
        {
            "get_new_blocks",
            "free_blocks",
            "touch",
            "cache_full_blocks",
            "get_cached_block",
            "reset_prefix_cache",
            "get_usage",
            "get_num_free_blocks",
        }
    ),
    has_block_mask=False,
    cache_promotes_partial=False,
    null_ref_cnt_moves=True,
    consumer_contract=None,
    consumer_contract_source="none: its pool publishes no KV events",
)

#: LMDeploy's ``LogicalAllocator`` (PyTorch engine, 0.18.0): a pool without a prefix cache.
#: Each field was measured on the real allocator (tests/conformance/test_lmdeploy_target.py).
LMDEPLOY = Profile(
    name="lmdeploy",
    description="LMDeploy's LogicalAllocator (0.18.0): allocation, ref counts and free only "
    "(its prefix cache is the BlockTrie above it); a freed block is reused first, the "
    "blocks of one free in the order given (a stack); no evict_first; no null block (the "
    "adapter leaves the spec's out)",
    has_evict_first=False,
    operations=frozenset({"get_new_blocks", "free_blocks", "touch", "get_num_free_blocks"}),
    has_block_mask=False,
)

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        SEED,
        VLLM_0_10,
        VLLM_0_12,
        VLLM_0_13,
        VLLM_0_14,
        VLLM_0_19,
        VLLM_0_22,
        VLLM_0_23,
        VLLM_0_24,
        VLLM_0_26,
        VLLM_0_27,
        VLLM_0_29,
        VLLM_0_30,
        VLLM_0_31,
        VLLM_0_32,
        VLLM_0_33,
        VLLM_MLX,
        LMDEPLOY,
    )
}

#: (first release, profile): the profile of a release is the last row at or before it.
VLLM_RELEASES: tuple[tuple[tuple[int, int, int], Profile], ...] = (
    ((0, 10, 1), VLLM_0_10),
    ((0, 12, 0), VLLM_0_12),
    ((0, 13, 0), VLLM_0_13),
    ((0, 14, 0), VLLM_0_14),
    ((0, 19, 0), VLLM_0_19),
    ((0, 22, 0), VLLM_0_22),
    ((0, 23, 0), VLLM_0_23),
    ((0, 24, 0), VLLM_0_24),
    ((0, 26, 0), VLLM_0_26),
    ((0, 27, 0), VLLM_0_27),
    ((0, 28, 0), VLLM_0_26),
    ((0, 29, 0), VLLM_0_29),
    ((0, 30, 0), VLLM_0_30),
    ((0, 31, 0), VLLM_0_31),
    ((0, 32, 0), VLLM_0_32),
    ((0, 33, 0), VLLM_0_33),
)


def get_profile(name: str) -> Profile:
    """The profile called ``name``; ``KeyError`` names the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise KeyError(f"unknown profile {name!r}; known profiles: {known}") from None


def profile_for_version(version: str) -> Profile:
    """The profile of vLLM release ``version`` (``"0.27.1"``, ``"0.34.0.dev118+g4ba787ec9"``).

    The last row of :data:`VLLM_RELEASES` at or before ``version`` in PEP 440's order, so a
    pre-release or development build of X.Y.Z is judged by the newest profile below X.Y.Z,
    and releases newer than the last measured one get the newest profile. ``ValueError``
    for a string PEP 440 does not write, or a release older than 0.10.1.
    """
    parsed = parse_version(version)
    chosen = None
    for first, profile in VLLM_RELEASES:
        if Version(".".join(map(str, first)), first).key() <= parsed.key():
            chosen = profile
    if chosen is None:
        raise ValueError(f"vLLM {version} is older than 0.10.1, the oldest release with a profile")
    return chosen
