"""``aphrodite`` / ``aphrodite==X.Y.Z`` / ``aphrodite@PATH``: Aphrodite Engine's v1
``BlockPool``, a port of vLLM's, loaded by the vLLM adapter under its own package name
(``aphrodite/v1/core/block_pool.py``, importing ``aphrodite.*``).

Its release wheel is ``aphrodite-engine`` on the package index; like vLLM's, it is
downloaded once without dependencies and only the pool's files are kept
(``.../kvpool/aphrodite/X.Y.Z/aphrodite/...``).
"""

from __future__ import annotations

from types import MappingProxyType

from ...manager.target import ManagerTargetFactory
from ..description import TargetDescription
from ..errors import TargetLoadError
from ..registry import ProfileChoice, ReleaseSupport
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


class AphroditeEntry(VllmEntry):
    name = "aphrodite"
    label = "Aphrodite"
    summary = "Aphrodite Engine's v1 BlockPool (a port of vLLM's)"
    forms = MappingProxyType(
        {
            "aphrodite==X.Y.Z": "Aphrodite's BlockPool from its release wheel (aphrodite-engine "
            "on the index), downloaded once; 0.24.1 is the release read and profiled",
            "aphrodite@PATH": "an Aphrodite checkout or unpacked wheel at PATH (PATH holds "
            "aphrodite/v1/core/block_pool.py)",
        }
    )
    manager_summary = ""
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

    def load_manager(self, described: TargetDescription) -> tuple[ManagerTargetFactory | None, str]:
        raise TargetLoadError(
            f"{described.text}: Aphrodite's KV cache manager is not a target yet (its pool "
            "is); leave --manager out"
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
