"""A release the suite has not met, made from a real one (vLLM 0.34.0's files, downloaded
once into the cache): what the adapter cannot do is a loading error naming the place
(exit 2), and a private layout it does not know is read through the pool's own lookups.

A failed download fails these tests with pip's own message: nothing is skipped silently.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm.distribution import cached_release
from kvpool.conformance.engines.vllm.releases import ReleaseError
from kvpool.conformance.targets.loading import load_target
from kvpool.spec import CacheFullBlocks, GetCachedBlock, GetNewBlocks, PoolConfig, get_profile

VERSION = "0.34.0"
POOL = Path("vllm/v1/core/block_pool.py")
#: Small, quick runs: what is asserted is the exit status and the message.
SHORT = ["--max-examples", "15", "--steps", "15", "--seed", "1"]


@pytest.fixture(scope="module")
def release() -> Path:
    try:
        return cached_release(VERSION)
    except ReleaseError as exc:
        pytest.fail(f"could not fetch vLLM {VERSION}: {exc}", pytrace=False)


def copy_with(release: Path, tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """A copy of the release's files with each ``old -> new`` edit made once in its pool."""
    tree = tmp_path / "tree"
    shutil.copytree(release, tree)
    pool = tree / POOL
    source = pool.read_text(encoding="utf-8")
    for old, new in edits:
        assert source.count(old) >= 1, old
        source = source.replace(old, new)
    pool.write_text(source, encoding="utf-8")
    return tree


def conform(tree: Path, *options: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["conform", "--target", f"vllm@{tree}", "--profile", "vllm-0.33", *SHORT, *options]
    )
    return result.exit_code, result.output


#: A call into a module the suite never loads (``vllm.platforms`` is a package: its
#: ``__init__`` imports most of vLLM), planted where every step calls.
PLATFORM_CALL = (
    (
        "from vllm.logger import init_logger\n",
        "from vllm.logger import init_logger\nfrom vllm.platforms import current_platform\n",
    ),
    (
        "        return self.free_block_queue.num_free_blocks\n",
        "        current_platform.synchronize()\n"
        "        return self.free_block_queue.num_free_blocks\n",
    ),
)


#: The same call, its error swallowed by the release's own code.
SWALLOWED_CALL = (
    PLATFORM_CALL[0],
    (
        "        return self.free_block_queue.num_free_blocks\n",
        "        try:\n"
        "            current_platform.synchronize()\n"
        "        except Exception:\n"
        "            pass\n"
        "        return self.free_block_queue.num_free_blocks\n",
    ),
)


@pytest.mark.parametrize("planted", [PLATFORM_CALL, SWALLOWED_CALL], ids=["raised", "swallowed"])
def test_a_call_into_a_placeholder_is_a_loading_error_naming_the_module(
    release: Path, tmp_path: Path, planted: tuple[tuple[str, str], ...]
) -> None:
    tree = copy_with(release, tmp_path, *planted)
    code, output = conform(tree, "--level", "safety", "--machine", "pool")
    assert code == 2, output
    flat = " ".join(output.split())
    assert "vllm.platforms is a placeholder" in flat, output
    assert "vllm/v1/core/block_pool.py line" in flat, output
    assert "not a finding" in flat, output


def test_the_unplanted_copy_runs(release: Path, tmp_path: Path) -> None:
    """The control of the test above: the same copy without the planted call passes."""
    code, output = conform(copy_with(release, tmp_path), "--level", "safety", "--machine", "pool")
    assert code == 0, output


#: The index keeps ids, its duplicates under a name the readers do not know.
RENAMED_DUPLICATES = (("self._dup_ids", "self._more_ids"),)


def test_an_unknown_index_layout_is_read_through_the_lookups(release: Path, tmp_path: Path) -> None:
    tree = copy_with(release, tmp_path, *RENAMED_DUPLICATES)
    factory, _ = load_target(f"vllm@{tree}")
    target = factory(PoolConfig(4, hash_block_size=1), get_profile("vllm-0.33"))
    assert "index" in target.observes
    (block,) = target.apply(GetNewBlocks(1)).result
    key = b"\x01" * 32
    target.apply(CacheFullBlocks((key,), (block,), 0, 1, 1, 0))
    target.apply(GetCachedBlock(key, (0,)))
    view = target.view()
    assert view.index is None  # the layout is not read...
    assert view.lookups is not None and any(hit == block for _, hit in view.lookups)
    code, output = conform(tree, "--level", "order", "--machine", "pool")
    assert code == 0, output  # ...and the pool is judged through its lookups


def test_the_lookups_catch_a_fault_in_an_unknown_layout(release: Path, tmp_path: Path) -> None:
    """A lookup that never hits, in the same unknown layout: a finding (exit 1), not a
    loading error."""
    fault = (
        "        return None if block_id is None else self._blocks[block_id]\n",
        "        return None\n",
    )
    tree = copy_with(release, tmp_path, *RENAMED_DUPLICATES, fault)
    code, output = conform(tree, "--level", "safety", "--machine", "pool")
    assert code == 1, output


def test_a_moved_attribute_is_a_loading_error_naming_the_release(
    release: Path, tmp_path: Path
) -> None:
    """The adapter reads ``pool.blocks``: a release that renames it cannot be driven, and
    says so before anything runs (exit 2), never as a finding."""
    tree = copy_with(release, tmp_path, ("self.blocks", "self.all_blocks"))
    code, output = conform(tree, "--level", "safety", "--machine", "pool")
    flat = " ".join(output.split())
    assert code == 2, output
    assert f"({VERSION})" in flat and "has no blocks list" in flat, output
    assert "not a finding" in flat, output


def test_a_result_of_another_shape_is_a_loading_error_naming_the_adapters_place(
    release: Path, tmp_path: Path
) -> None:
    """A lookup answering ids instead of blocks: the adapter's read of it fails mid-run, which
    is exit 2 naming the release and the adapter's line, never a finding."""
    ids = (
        "            cached_blocks.append(block)\n",
        "            cached_blocks.append(block.block_id)\n",
    )
    code, output = conform(
        copy_with(release, tmp_path, ids), "--level", "safety", "--machine", "pool"
    )
    flat = " ".join(output.split())
    assert code == 2, output
    place = "no longer takes the adapter's call at targets/vllm_api/calls.py line"
    assert f"({VERSION}) {place}" in flat, output
    assert "has no attribute 'block_id'" in flat and "not a finding" in flat, output


def test_a_request_field_the_adapter_cannot_fill_is_named_with_its_reader(
    release: Path, tmp_path: Path
) -> None:
    new_field = (
        "        new_full_blocks = blocks[num_cached_blocks:num_full_blocks]\n",
        "        new_full_blocks = blocks[num_cached_blocks:num_full_blocks]\n"
        "        assert request.priority_class is not None\n",
    )
    code, output = conform(copy_with(release, tmp_path, new_field), "--level", "safety")
    flat = " ".join(output.split())
    assert code == 2, output
    assert "priority_class (read by block_pool.BlockPool.cache_full_blocks)" in flat, output
