"""SGLang 0.5.23, the newest release on the index, through its own code.

The 0.5 generation's adapter (``conformance/engines/sglang/manager_0_5.py``) builds
``RadixCache`` from a ``CacheInitParams`` and makes the scheduler's calls of the release:
``match_kv_cache``, ``lock``, ``alloc_for_extend`` / ``alloc_for_decode``,
``checkpoint_kv_cache`` and ``release_kv_cache``. Here: the files load alone and leave
nothing behind; the version and the tree layout pick the adapter; the choices that differ
from 0.4.6.post5 are measured on the release (eviction frees only the shortfall, salts
partition the tree, events are hashed by position with no parent under the root); a
one-line fault planted in each of those functions of the release (in a copy loaded as
``sglang@PATH``) is caught by the rule it breaks; a checkout laid out like the release's
source runs.

Needs torch and numpy (``pip install -e '.[sglang]'``), a C++ compiler and
OpenSSL's headers for the events tests (the release's node hash is compiled on first use).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

for _module in ("torch", "numpy"):
    pytest.importorskip(
        _module, reason=f"SGLang's allocator needs {_module}: pip install -e '.[sglang]'"
    )

from engine_managers import first_difference, loaded  # noqa: E402  (this folder is on sys.path)
from kvpool.conformance.engines.sglang.generations import is_0_5  # noqa: E402
from kvpool.conformance.engines.sglang.loader import SglangUnavailable  # noqa: E402
from kvpool.conformance.engines.sglang.manager import SglangManagerTarget  # noqa: E402
from kvpool.conformance.engines.sglang.manager_0_5 import SglangManagerTarget05  # noqa: E402
from kvpool.conformance.engines.sglang.release_0_5 import MODULES  # noqa: E402
from kvpool.conformance.machines.requests.target import RequestSetup  # noqa: E402
from kvpool.conformance.targets.loading import TargetLoadError, load_manager  # noqa: E402
from kvpool.spec import SEED, BlockStored, PoolConfig  # noqa: E402
from kvpool.spec.manager import Admit, Compute, Finish, ManagerConfig  # noqa: E402

VERSION = "0.5.23"
SETUP = RequestSetup(ManagerConfig(1), PoolConfig(9, True, 1))
#: 8 pages of 2 tokens.
PAGED = RequestSetup(ManagerConfig(2), PoolConfig(9, True, 2))
EVENTS = replace(SETUP, pool=replace(SETUP.pool, enable_kv_cache_events=True))
SERVED = (Admit("a", (1, 2, 3), None), Compute("a"), Finish("a"))
#: Two requests of one prompt computed side by side: the second's checkpoint finds the
#: first's tokens in the tree and must free its duplicate slots.
TWINS = (Admit("a", (1, 2, 3), None), Admit("b", (1, 2, 3), None), Compute("a"), Compute("b"))


@pytest.fixture(scope="module")
def sglang05() -> Any:
    return loaded(f"sglang=={VERSION}")


def served(t: Any, rid: str, tokens: tuple[int, ...], salt: str | None = None) -> int:
    """Admit, compute and finish ``rid``; the tokens its admission found cached."""
    scheduled = t.admit(rid, tokens, salt)
    assert scheduled is not None
    t.commit(rid, False)
    t.finish(rid)
    return int(scheduled.num_computed_tokens)


def _planted(tmp_path: Path, sglang05: Any, rel: str, line: str, replacement: str) -> Any:
    """The release's files with the one ``line`` of ``rel`` replaced, from a copy."""
    tree = tmp_path / "sglang-planted"
    shutil.copytree(sglang05.release.origin, tree)
    path = tree / "sglang" / rel
    source = path.read_text(encoding="utf-8")
    assert source.count(line) == 1, (rel, line)
    path.write_text(source.replace(line, replacement), encoding="utf-8")
    factory, _ = load_manager(f"sglang@{tree}", "impl")
    return factory


# --- loading ----------------------------------------------------------------------------


def test_the_release_files_run_and_leave_nothing_behind(sglang05: Any) -> None:
    release = sglang05.release
    assert release.label == f"sglang {VERSION}"
    assert release.radix_cache.RadixCache.__module__ == "sglang.srt.mem_cache.radix_cache"
    t = sglang05(SETUP, SEED)
    assert isinstance(t, SglangManagerTarget05)
    assert type(t.allocator).__module__ == "sglang.srt.mem_cache.allocator.token"
    assert served(t, "a", (1, 2, 3)) == 0
    assert not any(n.split(".")[0] == "sglang" for n in sys.modules)


def test_the_version_picks_the_api_generation() -> None:
    assert is_0_5("0.5.23") and is_0_5("0.5.1.post3") and is_0_5("0.6.0")
    assert not is_0_5("0.4.6.post5") and not is_0_5("0.4.10.post2")
    assert isinstance(loaded("sglang==0.4.6.post5")(SETUP, SEED), SglangManagerTarget)


def test_a_checkout_laid_out_like_the_release_source_runs(tmp_path: Path, sglang05: Any) -> None:
    """A clone's ``python/`` folder: ``sglang/`` with the release's files where its source
    keeps them (built here from the wheel's), no version file: placed by its layout."""
    checkout = tmp_path / "sglang" / "python"
    shutil.copytree(sglang05.release.origin / "sglang", checkout / "sglang")
    (checkout / "sglang" / "_version.py").unlink()
    factory, name = load_manager(f"sglang@{checkout},page=2", "impl")
    assert name == f"sglang@{checkout},page=2"
    assert factory.release.label == f"sglang at {checkout}"
    assert type(factory(PAGED, SEED).allocator).__name__ == "PagedTokenToKVPoolAllocator"
    assert first_difference(factory, PAGED, *SERVED, *TWINS, Finish("a"), Finish("b")) is None
    (checkout / "sglang" / MODULES[-1]).unlink()
    with pytest.raises(TargetLoadError, match=r"cpp_extension_loader\.py"):
        load_manager(f"sglang@{checkout}", "impl")


@pytest.mark.parametrize("module", ["torch", "pydantic"])
def test_without_an_extra_module_the_target_names_the_install_line(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(TargetLoadError, match=rf"{module} not installed: pip install"):
        load_manager(f"sglang=={VERSION}", "impl")


# --- what differs from 0.4.6.post5, measured ------------------------------------------------


def test_a_hit_stops_one_token_short_and_is_cut_to_pages(sglang05: Any) -> None:
    t = sglang05(SETUP, SEED)
    served(t, "a", (1, 2, 3, 4))
    assert served(t, "b", (1, 2, 3, 4)) == 3
    paged = loaded(f"sglang=={VERSION},page=2")(PAGED, SEED)
    served(paged, "a", (1, 2, 3, 4, 5))
    assert served(paged, "b", (1, 2, 3, 4, 5)) == 4
    assert served(paged, "c", (1, 2, 3, 4)) == 2


def test_eviction_frees_only_the_shortfall_where_0_4_freed_the_whole_need(
    sglang05: Any,
) -> None:
    """Four one-token leaves cached, four slots free, a request needing six: 0.5's
    ``evict_to_free_tokens`` evicts the shortfall (two leaves), 0.4.6.post5's
    ``alloc_token_slots`` evicted the whole need (every leaf)."""
    old = loaded("sglang==0.4.6.post5")
    left = []
    for factory in (sglang05, old):
        t = factory(SETUP, SEED)
        for i, token in enumerate((11, 12, 13, 14)):
            served(t, f"leaf{i}", (token,))
        assert t.admit("big", (1, 2, 3, 4, 5, 6), None) is not None
        left.append(len(t._nodes()))
    assert left == [2, 0]


def test_salts_partition_the_tree(sglang05: Any) -> None:
    t = sglang05(SETUP, SEED)
    served(t, "a", (1, 2, 3), "tenant-a")
    assert served(t, "b", (1, 2, 3), "tenant-b") == 0
    assert served(t, "c", (1, 2, 3), "tenant-a") == 2
    assert served(t, "d", (1, 2, 3)) == 0


def test_events_hash_by_position_with_no_parent_under_the_root(sglang05: Any) -> None:
    """The two event findings of 0.4.6.post5 are not in 0.5.23: a first page names no
    parent, and ``[1, 2]`` under ``[3]`` is not published under the hashes of ``[1, 2]``
    under the root."""
    t = sglang05(EVENTS, SEED)
    served(t, "a", (1, 2, 9))
    first = [e for e in t.take_events() if isinstance(e, BlockStored)]
    assert first[0].parent_block_hash is None
    root_hashes = {h for e in first for h in e.block_hashes}
    served(t, "b", (3, 1, 2, 9))
    later = [h for e in t.take_events() if isinstance(e, BlockStored) for h in e.block_hashes]
    assert len(later) == 4 and not root_hashes & set(later)


# --- planted faults in the release's own functions ---------------------------------------


def test_the_unplanted_release_passes_the_sequences(sglang05: Any) -> None:
    assert first_difference(sglang05, SETUP, *SERVED) is None
    assert first_difference(sglang05, SETUP, *TWINS, Finish("a"), Finish("b")) is None


def test_a_lock_kept_by_release_kv_cache_is_caught(tmp_path: Path, sglang05: Any) -> None:
    factory = _planted(
        tmp_path, sglang05, "srt/mem_cache/common.py", "tree_cache.unlock(req.lock)", "pass"
    )
    found = first_difference(factory, SETUP, *SERVED)
    assert found is not None and "property 'refcounts-match-tables' broken" in found, found


def test_a_duplicate_kept_by_checkpoint_is_caught(tmp_path: Path, sglang05: Any) -> None:
    factory = _planted(
        tmp_path,
        sglang05,
        "srt/mem_cache/radix_cache.py",
        "kv_indices[req.kv.cache_protected_len : result.prefix_len],",
        "kv_indices[result.prefix_len : result.prefix_len],",
    )
    found = first_difference(factory, SETUP, *TWINS)
    assert found is not None and "invariant 'pages-accounted'" in found, found


def test_a_removal_the_recorder_drops_is_caught_at_the_events_level(
    tmp_path: Path, sglang05: Any
) -> None:
    factory = _planted(
        tmp_path,
        sglang05,
        "srt/mem_cache/events.py",
        "self.enqueue(BlockRemoved(block_hashes=block_hashes, medium=medium))",
        "pass",
    )
    evicting = (*SERVED, Admit("b", (4, 5, 6, 7, 8, 9, 10), None), Compute("b"))
    assert first_difference(sglang05, SETUP, *evicting, consumer="count") is None
    found = first_difference(factory, SETUP, *evicting, consumer="count")
    assert found is not None and "property 'events-replay-index' broken" in found, found


def test_without_a_compiler_the_events_level_is_a_usage_error(
    sglang05: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release's node hash is compiled on first use; where it cannot be, building a
    manager with events says what is missing (exit 2 from ``kvpool conform``), and no run
    starts that would blame SGLang for the machine."""
    native = sglang05.release.modules["sglang.srt.mem_cache.cpp_utils.native_hash"]

    def no_compiler() -> None:
        raise RuntimeError("Failed to load HiCache native hash extension")

    monkeypatch.setattr(native, "_load_native_hash_module", no_compiler)
    with pytest.raises(SglangUnavailable, match="C\\+\\+ compiler, ninja and OpenSSL"):
        sglang05(EVENTS, SEED)
    quiet = replace(SETUP, pool=replace(SETUP.pool, enable_kv_cache_events=False))
    assert isinstance(sglang05(quiet, SEED), SglangManagerTarget05)  # no events: no hash


def test_conform_runs_the_release_and_judges_its_events(tmp_path: Path) -> None:
    """The issue's command, at a small size: the paged manager run and its events pass."""
    from click.testing import CliRunner
    from kvpool.conformance.cli import main

    args = ["conform", "--target", f"sglang=={VERSION},page=drawn", "--machine", "requests"]
    args += ["--level", "events", "--consumer", "count", "-n", "10", "--steps", "10"]
    result = CliRunner().invoke(
        main, [*args, "--seed", "1", "--no-coverage", "--trace-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert f"sglang {VERSION}" in result.output
    row = next(line for line in result.output.splitlines() if "requests/manager (count)" in line)
    assert "pass" in row, row
