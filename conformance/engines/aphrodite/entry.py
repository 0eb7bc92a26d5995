"""``aphrodite`` / ``aphrodite==X.Y.Z`` / ``aphrodite@PATH``: Aphrodite Engine's v1
``BlockPool``, a port of vLLM's, loaded by the vLLM adapter under its own package name
(``aphrodite/v1/core/block_pool.py``, importing ``aphrodite.*``); with ``--manager
aphrodite``, its own ``KVCacheManager`` (``aphrodite/v1/core/kv_cache_manager.py``, with
its coordinator and single-type managers) over that pool, driven by vLLM's manager adapter.

Its release wheel is ``aphrodite-engine`` on the package index; like vLLM's, it is
downloaded once without dependencies and only the pool's files are kept
(``.../kvpool/aphrodite/X.Y.Z/aphrodite/...``; the manager's beside them, in
``aphrodite-manager/X.Y.Z``).
"""

from __future__ import annotations

from types import MappingProxyType

from ...targets.description import TargetDescription
from ...targets.registry import ProfileChoice, ReleaseSupport
from ..vllm.distribution import Distribution
from ..vllm.entry import VllmEntry

#: The release whose pool the suite has read and profiled.
KNOWN = "0.24.1"

#: Why 0.24.1 is judged as vLLM 0.30, read off its ``aphrodite/v1/core/block_pool.py`` and
#: ``kv_cache_utils.py``: the pool of vLLM's 0.30 generation without 0.30's two additions
#: (``unpin_blocks``, ``KVCacheBlock.pool``), which the suite then does not draw.
WHY = (
    "read off its block_pool.py: vLLM 0.30's pool (unkeyed frees to the front, keyed to the "
    "back, no evict_first; cache_partial_block with replace_existing_hashes, strictly inside "
    "a block unless replacing; move_block_hashes, is_block_writable; the LoRA name alone in "
    "the block hash) without unpin_blocks and KVCacheBlock.pool"
)

#: The manager's API generation, read off 0.24.1's ``kv_cache_manager.py`` (what
#: :func:`~..vllm.manager_api.manager_api` measures on it; a test keeps the two agreeing):
#: vLLM 0.33's calls over a pool of vLLM 0.30's generation.
MANAGER_GENERATION = (
    "get_computed_blocks answers the shared-prefix boundary too, remove_skipped_blocks takes "
    "the prompt length, take_kv_cache_block_copies and evict_blocks exist, two groups may "
    "share one spec"
)


class AphroditeEntry(VllmEntry):
    name = "aphrodite"
    label = "Aphrodite"
    summary = "Aphrodite Engine's v1 BlockPool and KVCacheManager (ports of vLLM's)"
    forms = MappingProxyType(
        {
            "aphrodite==X.Y.Z": "Aphrodite's BlockPool (with --manager aphrodite, its "
            "KVCacheManager) from its release wheel (aphrodite-engine on the index), downloaded "
            "once; 0.24.1 is the release read and profiled",
            "aphrodite@PATH": "an Aphrodite checkout or unpacked wheel at PATH (PATH holds "
            "aphrodite/v1/core/block_pool.py)",
        }
    )
    manager_summary = (
        "the KV cache manager of the Aphrodite release --target names (aphrodite==X.Y.Z, "
        "aphrodite@PATH): its own KVCacheManager, coordinator and single-type managers; "
        f"0.24.1's speaks vLLM 0.33's manager calls ({MANAGER_GENERATION})"
    )
    dist = Distribution(project="aphrodite-engine", package="aphrodite", label="Aphrodite")
    project = dist.project

    def support(self, version: str) -> ReleaseSupport:
        if version == KNOWN:
            return ReleaseSupport(True)
        return ReleaseSupport(
            None,
            f"only {KNOWN}'s pool was read and profiled: kvpool conform --target "
            f"{self.release_form(version)} runs it judged as {KNOWN} is",
        )

    def profile_of(self, described: TargetDescription) -> ProfileChoice:
        from ..vllm.entry import vllm_version

        version = vllm_version(described)
        if version == KNOWN:
            return ProfileChoice("vllm-0.30", WHY)
        return ProfileChoice(
            "vllm-0.30",
            f"Aphrodite {version or '(no version)'} is judged as 0.24.1 is, the release read "
            f"and profiled ({WHY}); name another profile with --profile if its pool changed",
        )


ENTRY = AphroditeEntry()
