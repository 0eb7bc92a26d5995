"""``aphrodite`` / ``aphrodite==X.Y.Z`` / ``aphrodite@PATH``: Aphrodite Engine's v1
``BlockPool``, a port of vLLM's, loaded by the vLLM adapter under its own package name
(``aphrodite/v1/core/block_pool.py``, importing ``aphrodite.*``).

Its release wheel is ``aphrodite-engine`` on the package index; like vLLM's, it is
downloaded once without dependencies and only the pool's files are kept
(``.../kvpool/aphrodite/X.Y.Z/aphrodite/...``).
"""

from __future__ import annotations

from types import MappingProxyType

from ..description import TargetDescription
from ..registry import ProfileChoice
from ..vllm.entry import VllmEntry
from ..vllm.wheel import Distribution

#: The release whose pool the suite has read and profiled.
KNOWN = "0.24.1"

#: Why 0.24.1 is judged as vLLM 0.29, from its ``aphrodite/v1/core/block_pool.py``.
WHY = (
    "read off its block_pool.py: vLLM 0.29's free rule (unkeyed frees to the front, keyed "
    "to the back, no evict_first), cache_partial_block, move_block_hashes, "
    "is_block_writable; no unpin_blocks, no KVCacheBlock.pool"
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

    def versions(self) -> tuple[str, ...]:
        return tuple(sorted({*super().versions(), KNOWN}))

    def profile_of(self, described: TargetDescription) -> ProfileChoice:
        from ..vllm.entry import vllm_version

        version = vllm_version(described)
        if version == KNOWN:
            return ProfileChoice("vllm-0.29", WHY)
        return ProfileChoice(
            "vllm-0.29",
            f"Aphrodite {version or '(no version)'} is judged as 0.24.1 is, the release read "
            f"and profiled ({WHY}); name another profile with --profile if its pool changed",
        )


ENTRY = AphroditeEntry()
