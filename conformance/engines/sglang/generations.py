"""Which adapter drives an SGLang release: one per API generation of its radix cache.

=============  =========================================  ==================================
generation     what changed                               modules
=============  =========================================  ==================================
0.4            ``RadixCache(req_to_token_pool, allocator,  :mod:`.release`, :mod:`.manager`
               page_size=...)``, ``match_prefix(key)``,
               ``cache_unfinished_req`` /
               ``cache_finished_req``, allocators in
               ``memory_pool.py`` / ``paged_allocator.py``
0.5            ``RadixCache(CacheInitParams)``, params     :mod:`.release_0_5`,
               records (``MatchPrefixParams``, ...),       :mod:`.manager_0_5`
               ``TreeLock`` receipts, the scheduler's
               calls in ``common.py`` / ``allocation.py``
               (``checkpoint``, ``release_kv_cache``),
               allocators in ``mem_cache/allocator/``
=============  =========================================  ==================================

A release is placed by its version (0.5 and later: the 0.5 generation); a tree by its
layout (``srt/mem_cache/allocator/token.py`` exists only from 0.5 on), so a checkout
without a readable version is placed too. What the two loaders share (the error, the extra
check, the isolated load, the stand-ins both need) is :mod:`.loader`.
"""

from __future__ import annotations

from pathlib import Path

from kvpool.spec.versions import VersionError, parse_version

from ...machines.requests.target import ManagerTargetFactory
from ...targets.errors import TargetUsageError

#: The first release of the 0.5 generation's API.
FIRST_0_5 = (0, 5)


def is_0_5(version: str) -> bool:
    """Whether ``sglang==version`` is of the 0.5 generation."""
    try:
        parsed = parse_version(version)
    except VersionError as exc:
        raise TargetUsageError(f"sglang=={version}: {exc}") from exc
    return parsed.release[:2] >= FIRST_0_5


def release_managers(version: str, name: str, page_size: int | None) -> ManagerTargetFactory:
    """The managers of ``sglang==version`` (downloaded once), named ``name``."""
    if is_0_5(version):
        from .manager_0_5 import sglang_managers_0_5
        from .release_0_5 import load_release as load_0_5

        new = load_0_5(version)
        return sglang_managers_0_5(new, f"{name} ({new.label})", page_size)
    from .manager import sglang_managers
    from .release import load_release

    old = load_release(version)
    return sglang_managers(old, f"{name} ({old.label})", page_size)


def tree_managers(root: Path, name: str, page_size: int | None) -> ManagerTargetFactory:
    """The managers of the SGLang tree under ``root`` (which holds ``sglang/``)."""
    from . import release_0_5

    if release_0_5.is_generation(root):
        from .manager_0_5 import sglang_managers_0_5

        new = release_0_5.load_tree(root, release_0_5.version_label(root))
        return sglang_managers_0_5(new, f"{name} ({new.label})", page_size)
    from .manager import sglang_managers
    from .release import load_tree, version_label

    old = load_tree(root, version_label(root))
    return sglang_managers(old, f"{name} ({old.label})", page_size)
