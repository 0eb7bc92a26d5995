"""Which driver runs an SGLang release: one per API generation of its scheduler and cache.

=============  =========================================  ==================================
generation     what changed                               modules
=============  =========================================  ==================================
0.4            ``RadixCache(req_to_token_pool, allocator,  :mod:`.scheduler_release_0_4`,
               page_size=...)``, ``match_prefix(key)``,   :mod:`.driver_0_4`
               ``cache_unfinished_req`` /
               ``cache_finished_req``, allocators in
               ``memory_pool.py`` / ``paged_allocator.py``
0.5            ``RadixCache(CacheInitParams)``, params     :mod:`.scheduler_release`,
               records (``MatchPrefixParams``, ...),       :mod:`.driver`
               ``TreeLock`` receipts, the scheduler's
               calls in ``common.py`` / ``allocation.py``
               (``checkpoint``, ``release_kv_cache``),
               allocators in ``mem_cache/allocator/``
=============  =========================================  ==================================

In both generations the radix cache is called only by the scheduler's own code (``Req.
init_next_round_input``, the prefill adder, ``ScheduleBatch``, the batch result
processor): driving it one request action at a time would mean restating that code, so
the requests machine refuses every release (exit 2) and names the engine machine, where
the release's own ``Scheduler`` makes every call.

A release is placed by its version (0.5 and later: the 0.5 generation); a tree by its
layout (``srt/mem_cache/allocator/token.py`` exists only from 0.5 on), so a checkout
without a readable version is placed too. What the loaders share (the error, the extra
check, the isolated load, the stand-ins) is :mod:`.loader`.
"""

from __future__ import annotations

from kvpool.spec.versions import VersionError, parse_version

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
    """The requests machine's refusal of an SGLang release or tree."""
    return TargetLoadError(
        f"{text}: SGLang's radix cache is called only by its scheduler's own code, which "
        "the requests machine would have to restate; check it with --machine engine (the "
        "release's own Scheduler plans every batch)"
    )
