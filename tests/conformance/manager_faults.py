"""One-line faults planted in vLLM 0.33.0's own KV cache manager.

Each is an edit of one line of the cached release's ``kv_cache_manager.py``,
``kv_cache_coordinator.py``, ``single_type_kv_cache_manager.py`` or (the block hash's
extra keys) ``kv_cache_utils.py`` (the old text may carry
a neighbouring line, only so that it occurs once), applied to a copy of the cached tree
(:func:`planted_manager_tree`) and loaded as ``vllm@PATH`` with ``--manager vllm``. They
were chosen by reading the manager for the lines whose loss a user would feel: a lost
prefix hit, a request reading another's KV, blocks freed under a running request, an
admission that evicts what it is about to use, a reset that reports success and keeps the
cache.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

CORE = Path("vllm") / "v1" / "core"


@dataclass(frozen=True)
class ManagerFault:
    """An edit of one file of the manager, and what a user would see."""

    file: str
    old: str
    new: str
    #: What the user would see.
    effect: str
    #: Texts one of which the finding's message must contain (the property or comparison
    #: that catches it).
    caught_by: tuple[str, ...]


#: What catches a block hash that leaves an attribute out: the property, or (where the
#: release's coarser hashes paired two of the spec's keys with one of its own first) the
#: key comparison, a hit carrying another key, or another salt's data read.
PARTITION_BROKEN = ("keys-partitioned", "keys expected", "hit-keys", "own-contents")

FAULTS: dict[str, ManagerFault] = {
    "free head first": ManagerFault(
        "single_type_kv_cache_manager.py",
        "self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))",
        "self.block_pool.free_blocks(self.pop_blocks_for_free(request_id))",
        "a finished request's first blocks, which every hit needs, are evicted first",
        ("tail-first-free",),
    ),
    "hit not touched": ManagerFault(
        "single_type_kv_cache_manager.py",
        "            self.block_pool.touch(new_computed_blocks)\n",
        "            pass\n",
        "a prefix hit stays in the free queue: the next allocation hands it out again",
        ("refcounts-match-tables", "ref_cnt", "write-guard", "hit-keys"),
    ),
    "free hits not counted": ManagerFault(
        "single_type_kv_cache_manager.py",
        "        return num_new_blocks + num_evictable_blocks\n",
        "        return num_new_blocks\n",
        "an admission whose hits sit in the free queue is let in without room for them "
        "and the allocation fails mid-way",
        ("Cannot get",),
    ),
    "full-attention hit past a miss": ManagerFault(
        "single_type_kv_cache_manager.py",
        "            if not cached_block:\n                break\n",
        "            if not cached_block:\n                continue\n",
        "a lookup skips a missing block and serves later blocks at the wrong positions",
        ("hit-keys", "own-contents", "admit(", "resume("),
    ),
    "whole prompt hit": ManagerFault(
        "kv_cache_manager.py",
        "        if max_cache_hit_length is None:\n"
        "            max_cache_hit_length = request.num_tokens - 1\n"
        "        computed_blocks, num_new_computed_tokens, num_uncached = (",
        "        if max_cache_hit_length is None:\n"
        "            max_cache_hit_length = request.num_tokens\n"
        "        computed_blocks, num_new_computed_tokens, num_uncached = (",
        "a fully cached prompt computes nothing, so there are no logits to sample from",
        ("property 'computes-last-token'", "admit(", "resume("),
    ),
    "sliding window hit too short": ManagerFault(
        "single_type_kv_cache_manager.py",
        "        blocks = cdiv(window_size - 1, block_size)\n",
        "        blocks = cdiv(window_size - 1, block_size) - 1\n",
        "a sliding-window hit without the first block of its window: attention reads the "
        "null block; under a window of at most one block, the block just computed ends up "
        "without its key, and the free queue in another order",
        ("admit(", "resume(", "hit-keys", "after compute: free queue order"),
    ),
    "sliding window hit blocks rounded down": ManagerFault(
        "single_type_kv_cache_manager.py",
        "        blocks = cdiv(window_size - 1, block_size)\n",
        "        blocks = (window_size - 1) // block_size\n",
        "a hit under a window that is not a whole number of blocks plus one token (4096 "
        "tokens over 16-token blocks) lacks the window's first block: attention reads the "
        "null block; under a window of at most one block, the block just computed ends up "
        "without its key, and the free queue in another order",
        ("admit(", "resume(", "hit-keys", "after compute: free queue order"),
    ),
    "hits not re-sent": ManagerFault(
        "kv_cache_manager.py",
        "            self.coordinator.emit_cached_block_events(request, computed_blocks)\n",
        "            pass\n",
        "a request in the full report mode is not reported by its prefix-cache hits: a "
        "router rebuilding whole prefix chains from the stream never learns the worker "
        "serves them",
        ("KV events differ",),
    ),
    "window block kept in the table": ManagerFault(
        "single_type_kv_cache_manager.py",
        "                break\n            freed.append(blocks[i])\n"
        "            blocks[i] = self._null_block\n",
        "                break\n            freed.append(blocks[i])\n",
        "a block that left the window is freed while the table still names it: another "
        "request overwrites it",
        ("refcounts-match-tables", "compute(", "expected"),
    ),
    "salt left out of the hash": ManagerFault(
        "kv_cache_utils.py",
        "        if (start_token_idx == 0 and request.cache_salt)\n",
        "        if (start_token_idx == 0 and request.cache_salt and False)\n",
        "another tenant's KV is served to a request with a cache_salt (and the salt no "
        "longer isolates tenants' timing either)",
        PARTITION_BROKEN,
    ),
    "LoRA left out of the hash": ManagerFault(
        "kv_cache_utils.py",
        '    return [("lora", lora_request.lora_name, lora_request.lora_path)]\n',
        "    return []\n",
        "a request under one LoRA adapter reads KV computed under another adapter, or none",
        PARTITION_BROKEN,
    ),
    "image offset left out of the hash": ManagerFault(
        "kv_cache_utils.py",
        '            extra_keys.append(("mm", mm_feature.identifier, offset - start_token_idx))\n',
        '            extra_keys.append(("mm", mm_feature.identifier))\n',
        "the same image at another place among the same placeholder tokens reads the other "
        "request's KV (the bug the offsets were added for)",
        PARTITION_BROKEN,
    ),
    "prefix cache never read": ManagerFault(
        "kv_cache_manager.py",
        "        # or calls a pooling model with all pooling).\n"
        "        if not self.prefix_cache_lookup_enabled(request):\n",
        "        # or calls a pooling model with all pooling).\n        if True:\n",
        "no request ever hits the prefix cache: every prompt is computed again",
        ("keys-shared", "resume-finds-prefix", "admit(", "resume("),
    ),
    "reset reported while refused": ManagerFault(
        "kv_cache_coordinator.py",
        "        return all([pool.reset_prefix_cache() for pool in pools])\n",
        "        all([pool.reset_prefix_cache() for pool in pools])\n        return True\n",
        "a reset refused while requests hold blocks is reported done: the caller believes "
        "stale KV is gone",
        ("reset_cache(",),
    ),
}


def planted_manager_tree(release: Path, where: Path, fault: ManagerFault | None) -> Path:
    """A copy of the release tree at ``release`` (pool and manager files) under ``where``
    with ``fault`` made once (none: an unchanged copy); the path to pass as ``vllm@PATH``."""
    tree = where / "vllm-manager-tree"
    shutil.copytree(release, tree)
    if fault is None:
        return tree
    path = tree / CORE / fault.file
    source = path.read_text()
    if source.count(fault.old) != 1:
        raise ValueError(
            f"{fault.file}: the edit's old text occurs {source.count(fault.old)} times, not once"
        )
    path.write_text(source.replace(fault.old, fault.new))
    return tree
