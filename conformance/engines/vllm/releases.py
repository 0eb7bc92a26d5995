"""Which vLLM releases the suite can check, and which of their files it runs.

Only the block pool and what it needs at import time are ever run: the pool itself, the
block / free-queue / hashing helpers, the KV event classes, the metrics collector and the
environment-variable table (``vllm.envs``, which decides how event hashes are published).
Everything else under ``vllm.*`` stays out and is replaced by inert placeholders
(:mod:`.isolation`).
"""

from __future__ import annotations

import re
from pathlib import Path

from kvpool.spec import versions


class ReleaseError(ValueError):
    """A vLLM version string or source tree that the suite cannot use; the message says why."""


#: Module name -> path inside a wheel or source tree. A release may lack the optional ones.
MODULES: dict[str, str] = {
    "vllm.v1.core.block_pool": "vllm/v1/core/block_pool.py",
    "vllm.v1.core.kv_cache_utils": "vllm/v1/core/kv_cache_utils.py",
    "vllm.v1.core.kv_cache_metrics": "vllm/v1/core/kv_cache_metrics.py",
    "vllm.distributed.kv_events": "vllm/distributed/kv_events.py",
    "vllm.utils.hashing": "vllm/utils/hashing.py",
    "vllm.envs": "vllm/envs.py",
}

#: Without these there is no pool to check.
REQUIRED = frozenset(
    {
        "vllm.v1.core.block_pool",
        "vllm.v1.core.kv_cache_utils",
        "vllm.distributed.kv_events",
        "vllm.envs",
    }
)

#: The KV cache manager above the pool (``--manager vllm``), loaded only when asked for:
#: the manager, its coordinator and single-type managers, the ``KVCacheConfig`` classes
#: and the little they import at module level. A release may lack the optional ones.
MANAGER_MODULES: dict[str, str] = {
    "vllm.v1.core.kv_cache_manager": "vllm/v1/core/kv_cache_manager.py",
    "vllm.v1.core.kv_cache_coordinator": "vllm/v1/core/kv_cache_coordinator.py",
    "vllm.v1.core.single_type_kv_cache_manager": "vllm/v1/core/single_type_kv_cache_manager.py",
    "vllm.v1.kv_cache_interface": "vllm/v1/kv_cache_interface.py",
    "vllm.v1.kv_cache_spec_registry": "vllm/v1/kv_cache_spec_registry.py",
    "vllm.v1.kv_cache_layout": "vllm/v1/kv_cache_layout.py",
    "vllm.utils.math_utils": "vllm/utils/math_utils.py",
}

#: Without these there is no manager to drive.
MANAGER_REQUIRED = frozenset(
    {
        "vllm.v1.core.kv_cache_manager",
        "vllm.v1.core.kv_cache_coordinator",
        "vllm.v1.core.single_type_kv_cache_manager",
        "vllm.v1.kv_cache_interface",
    }
)

#: Read for the version only, never run.
VERSION_FILE = "vllm/_version.py"

#: Every wheel member the pool's cache may hold.
WHEEL_MEMBERS = frozenset([*MODULES.values(), VERSION_FILE])

#: Every wheel member the manager's cache (a folder of its own) may hold.
MANAGER_WHEEL_MEMBERS = WHEEL_MEMBERS | frozenset(MANAGER_MODULES.values())
#: What vLLM's event publisher (``kvpool publish``) reads beyond the pool's files: its
#: configuration class. Optional: a release without the file gets a placeholder.
PUBLISHER_MODULES: dict[str, str] = {"vllm.config.kv_events": "vllm/config/kv_events.py"}
PUBLISHER_MEMBERS = WHEEL_MEMBERS | frozenset(PUBLISHER_MODULES.values())

#: The oldest release whose pool speaks the API the suite drives: from 0.10.1 on, block
#: hashes are bytes carried by the request; before, they were named tuples computed inside
#: ``cache_full_blocks``.
OLDEST = (0, 10, 1)


def parse_version(text: str) -> tuple[int, ...]:
    """The release numbers of any version string vLLM writes (PEP 440: ``0.33.0``,
    ``0.34.0rc1``, ``0.33.0.post1``, ``0.34.0.dev118+g4ba787ec9``): ``(0, 33, 0)``, padded
    to three numbers; pre-, post-, development and local segments are dropped from the key.

    Raises :class:`ReleaseError` for anything PEP 440 does not write.
    """
    try:
        numbers = list(versions.parse_version(text).release)
    except versions.VersionError as exc:
        raise ReleaseError(str(exc)) from None
    while len(numbers) < 3:
        numbers.append(0)
    return tuple(numbers)


def check_supported(version: str) -> tuple[int, ...]:
    """The version key of ``version``, if the suite can drive that release's pool."""
    key = parse_version(version)
    if key[:3] < OLDEST:
        raise ReleaseError(
            f"vLLM {version} is older than 0.10.1: its pool keeps block hashes as named tuples "
            "computed inside cache_full_blocks, an API this suite does not drive "
            "(use 0.10.1 or later)"
        )
    return key


def version_in_tree(root: Path) -> str:
    """The release a source tree or unpacked wheel holds: from ``vllm/_version.py`` or a
    ``vllm-*.dist-info/METADATA`` beside it; ``"unknown"`` if neither says."""
    version_file = root / VERSION_FILE
    if version_file.is_file():
        text = version_file.read_text(encoding="utf-8", errors="replace")
        found = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text, re.M)
        if found:
            return found.group(1)
    for metadata in sorted(root.glob("vllm-*.dist-info/METADATA")):
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.partition(":")[2].strip()
    return "unknown"


def modules_in_tree(root: Path, extra: dict[str, str] | None = None) -> dict[str, Path]:
    """The release's module files found under ``root`` (required ones checked), with the
    ``extra`` ones (module -> path) that are there."""
    wanted = {**MODULES, **(extra or {})}
    found = {name: root / rel for name, rel in wanted.items() if (root / rel).is_file()}
    missing = sorted(REQUIRED - set(found))
    if missing:
        paths = ", ".join(MODULES[name] for name in missing)
        raise ReleaseError(f"{root} is not a vLLM source tree or unpacked wheel: missing {paths}")
    return found


def manager_modules_in_tree(root: Path) -> dict[str, Path]:
    """The release's KV cache manager files under ``root``; :class:`ReleaseError` names
    the missing ones when the manager cannot be loaded from there."""
    found = {name: root / rel for name, rel in MANAGER_MODULES.items() if (root / rel).is_file()}
    missing = sorted(MANAGER_REQUIRED - set(found))
    if missing:
        paths = ", ".join(MANAGER_MODULES[name] for name in missing)
        raise ReleaseError(f"{root} has no KV cache manager to drive: missing {paths}")
    return found
