"""kvpool.impl: a fast linked-list KV-cache block pool and its KV cache manager (vLLM V1
vocabulary: ``BlockPool``, ``KVCacheManager``)."""

from .block import KVCacheBlock
from .block_pool import BlockPool, ReuseWatcher
from .errors import BlockPoolError
from .events import AllBlocksCleared, BlockRemoved, BlockStored, KVCacheEvent
from .free_queue import FreeKVCacheBlockQueue
from .hash_map import BlockHashToBlockMap
from .hashing import (
    DEFAULT_NONE_HASH_SEED,
    NONE_HASH,
    HashFunction,
    encode,
    get_block_hash,
    get_group_id,
    get_none_hash,
    hash_block_tokens,
    init_none_hash,
    make_block_hash_with_group_id,
    request_block_hashes,
    sha256_hash,
)
from .kv_cache_manager import (
    FULL_ATTENTION,
    KVCacheGroupSpec,
    KVCacheManager,
    KVCacheManagerError,
    ManagedRequest,
    PrefixHit,
    Scheduled,
)
from .request import LoRARequest, LoRARequestLike, Request, RequestLike

__all__ = [
    "DEFAULT_NONE_HASH_SEED",
    "FULL_ATTENTION",
    "NONE_HASH",
    "AllBlocksCleared",
    "BlockHashToBlockMap",
    "BlockPool",
    "BlockPoolError",
    "BlockRemoved",
    "BlockStored",
    "FreeKVCacheBlockQueue",
    "HashFunction",
    "KVCacheBlock",
    "KVCacheEvent",
    "KVCacheGroupSpec",
    "KVCacheManager",
    "KVCacheManagerError",
    "LoRARequest",
    "LoRARequestLike",
    "ManagedRequest",
    "PrefixHit",
    "Request",
    "RequestLike",
    "ReuseWatcher",
    "Scheduled",
    "encode",
    "get_block_hash",
    "get_group_id",
    "get_none_hash",
    "hash_block_tokens",
    "init_none_hash",
    "make_block_hash_with_group_id",
    "request_block_hashes",
    "sha256_hash",
]
