"""Which adapter drives an SGLang release: one per API generation of its radix cache.

=============  =========================================  ==================================
generation     what changed                               modules
=============  =========================================  ==================================
0.4            ``RadixCache(req_to_token_pool, allocator,  :mod:`.release`, :mod:`.manager`
               page_size=...)``, ``match_prefix(key)``,   (``--machine requests``)
               ``cache_unfinished_req`` /
               ``cache_finished_req``, allocators in
               ``memory_pool.py`` / ``paged_allocator.py``
0.5            ``RadixCache(CacheInitParams)``, params     :mod:`.scheduler_release`,
               records (``MatchPrefixParams``, ...),       :mod:`.driver`
               ``TreeLock`` receipts, the scheduler's      (``--machine engine`` only)
               calls in ``common.py`` / ``allocation.py``
               (``checkpoint``, ``release_kv_cache``),
               allocators in ``mem_cache/allocator/``
=============  =========================================  ==================================

From 0.5 on the cache is called only by the scheduler's own code (``Req.
init_next_round_input``, the prefill adder, ``ScheduleBatch``, the batch result
processor): driving it one request action at a time would mean restating that code, so
the requests machine refuses a 0.5 release (exit 2) and names the engine machine, where
the release's own ``Scheduler`` makes every call.

A release is placed by its version (0.5 and later: the 0.5 generation); a tree by its
layout (``srt/mem_cache/allocator/token.py`` exists only from 0.5 on), so a checkout
without a readable version is placed too. What the loaders share (the error, the extra
check, the isolated load, the stand-ins) is :mod:`.loader`.
"""

from __future__ import annotations

from pathlib import Path

from kvpool.spec.versions import VersionError, parse_version

from ...machines.requests.target import ManagerTargetFactory
from ...targets.errors import TargetLoadError, TargetUsageError

#: The first release of the 0.5 generation's API.
FIRST_0_5 = (0, 5)


def is_0_5(version: str) -> bool:
    """Whether ``sglang==version`` is of the 0.5 generation."""
    try:
        parsed = parse_version(version)
    except VersionError as exc:
        raise TargetUsageError(f"sglang=={version}: {exc}") from exc
    return parsed.release[:2] >= FIRST_0_5


def engine_only(text: str) -> TargetLoadError:
    """The refusal of the requests machine for an SGLang of the 0.5 generation."""
    return TargetLoadError(
        f"{text}: from 0.5 on SGLang's radix cache is called only by its scheduler's own "
        "code, which the requests machine would have to restate; check it with --machine "
        "engine (the release's own Scheduler plans every batch)"
    )


def release_managers(version: str, name: str, page_size: int | None) -> ManagerTargetFactory:
    """The managers of ``sglang==version`` (downloaded once), named ``name``; a 0.5
    release is refused (:func:`engine_only`)."""
    if is_0_5(version):
        raise engine_only(name)
    from .manager import sglang_managers
    from .release import load_release

    old = load_release(version)
    return sglang_managers(old, f"{name} ({old.label})", page_size)


def tree_managers(root: Path, name: str, page_size: int | None) -> ManagerTargetFactory:
    """The managers of the SGLang tree under ``root`` (which holds ``sglang/``); a tree
    of the 0.5 layout is refused (:func:`engine_only`)."""
    from . import release_0_5

    if release_0_5.is_generation(root):
        raise engine_only(name)
    from .manager import sglang_managers
    from .release import load_tree, version_label

    old = load_tree(root, version_label(root))
    return sglang_managers(old, f"{name} ({old.label})", page_size)
