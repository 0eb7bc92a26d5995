"""A caching pool written from the docs alone (``caching_pool.py``: no ``evict_first``, no
``block_mask``, a list of blocks per key in its index) is judged on what it offers: the
suite never draws an argument its calls do not take, reads its index, and passes it; the
same pool with one ordering bug fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from caching_pool import CachingPool  # pytest puts this folder on sys.path
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.targets.loading import load_target
from kvpool.spec import CacheFullBlocks, CachePartialBlock, PoolConfig, get_profile

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)  # failures write their traces here


def conform(target: str, *args: str) -> Result:
    return CliRunner().invoke(
        main, ["conform", "--target", target, "--machine", "pool", "--no-coverage", *args]
    )


def test_the_adapter_does_not_draw_arguments_the_pool_does_not_take() -> None:
    factory, _ = load_target("caching_pool:CachingPool")
    target = factory(PoolConfig(4), get_profile("seed"))
    masked = CacheFullBlocks((b"a",), (1,), 0, 1, 1, 0, (True,))
    assert not target.takes(masked)  # type: ignore[attr-defined]
    assert target.takes(CacheFullBlocks((b"a",), (1,), 0, 1, 1, 0))  # type: ignore[attr-defined]
    impl, _ = load_target("impl")
    assert impl(PoolConfig(4), get_profile("seed")).takes(masked)  # type: ignore[attr-defined]
    replacing = CachePartialBlock((b"a",), 1, 1, 0, 2, replace_existing_hashes=True)
    assert impl(PoolConfig(4), get_profile("seed")).takes(replacing)  # type: ignore[attr-defined]


def test_its_index_is_read_as_lookups_see_it() -> None:
    factory, _ = load_target("caching_pool:CachingPool")
    target = factory(PoolConfig(4), get_profile("seed"))
    assert "index" in target.observes and isinstance(target.view().index, tuple)
    assert isinstance(CachingPool(4, True, 1).cached_block_hash_to_block, dict)


def test_the_pool_written_from_the_docs_passes() -> None:
    result = conform(
        "caching_pool:CachingPool", "--level", "safety,order", "-n", "40", "--seed", "1"
    )
    assert result.exit_code == 0, result.output


def test_the_same_pool_evicting_the_newest_prefix_first_fails() -> None:
    result = conform(
        "caching_pool:CachingPoolMRU", "--level", "order", "-n", "40", "--seed", "1", "--fail-fast"
    )
    assert result.exit_code == 1, result.output
    assert "get_new_blocks" in result.output
