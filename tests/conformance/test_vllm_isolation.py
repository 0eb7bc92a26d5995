"""Loading a vLLM release's block-pool files without vLLM: placeholders and a clean process.

The trees here are tiny stand-ins written into tmp_path, shaped like a release (the real
release is loaded end to end in test_vllm_release.py).
"""

from __future__ import annotations

import logging
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kvpool.conformance.engines.vllm.isolation import (
    IsolationError,
    Placeholder,
    PlaceholderLog,
    PlaceholderUsed,
    init_logger,
    load_release,
)
from kvpool.conformance.engines.vllm.releases import ReleaseError

POOL = """
from vllm.distributed.kv_events import BlockStored
from vllm.logger import init_logger
from vllm.v1.core.kv_cache_utils import KVCacheBlock
from vllm.v1.request import Request
from vllm.config import VllmConfig
from vllm.model_executor import layers

logger = init_logger(__name__)


class Base(VllmConfig):
    pass


def annotated(request: Request | None, blocks: list[Request]) -> VllmConfig:
    return VllmConfig


@layers.register
def decorated() -> str:
    return "kept"


class BlockPool:
    LABEL = "{label}"

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        logger.info_once("built %d blocks", num_gpu_blocks)
"""

UTILS = """
from dataclasses import dataclass
from vllm import envs
from vllm.utils import cdiv, GiB_bytes


@dataclass
class KVCacheBlock:
    block_id: int
    ref_cnt: int = 0


EVENT_HASHES_AS_INT = envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
"""

EVENTS = """
import msgspec
from vllm.v1.core.kv_cache_utils import KVCacheBlock


class BlockStored(msgspec.Struct):
    block_hashes: list[bytes]
"""

ENVS = """
import os
VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES = os.getenv("X_NOT_SET", "1") == "1"
"""


def make_tree(root: Path, label: str, pool: str = POOL) -> Path:
    files = {
        "vllm/v1/core/block_pool.py": pool.replace("{label}", label),
        "vllm/v1/core/kv_cache_utils.py": UTILS,
        "vllm/distributed/kv_events.py": EVENTS,
        "vllm/envs.py": ENVS,
        "vllm/_version.py": f"__version__ = version = '{label}'\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def vllm_modules() -> list[str]:
    return [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]


def test_a_release_loads_without_leaving_vllm_in_sys_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another test of this worker may have imported torch (the SGLang targets use it): take
    # it out for this load, so that the load itself is what is checked
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    before = vllm_modules()
    release = load_release(make_tree(tmp_path, "0.33.0"), "0.33.0")
    assert vllm_modules() == before
    assert release.BlockPool.LABEL == "0.33.0"
    assert release.BlockPool(3, True).blocks[2].block_id == 2
    # the real files ran, under their own names
    assert release.block_pool.__name__ == "vllm.v1.core.block_pool"
    assert release.kv_cache_utils.EVENT_HASHES_AS_INT is True
    assert "vllm.v1.core.block_pool" in release.real
    assert "vllm.config" in release.placeholder_modules()
    assert "torch" not in sys.modules


def test_module_level_code_gets_working_placeholders(tmp_path: Path) -> None:
    release = load_release(make_tree(tmp_path, "0.30.0"), "0.30.0")
    pool = release.block_pool
    assert pool.decorated() == "kept"  # a placeholder decorator leaves the function alone
    assert [c.__name__ for c in pool.Base.__mro__] == ["Base", "VllmConfig", "object"]
    assert pool.annotated.__annotations__["return"] is pool.VllmConfig
    assert "vllm.model_executor.layers.register()" in release.placeholders.at_load
    assert release.placeholders.after_load == []


def test_two_releases_live_side_by_side(tmp_path: Path) -> None:
    old = load_release(make_tree(tmp_path / "a", "0.24.0"), "0.24.0")
    new = load_release(make_tree(tmp_path / "b", "0.33.0"), "0.33.0")
    again = load_release(make_tree(tmp_path / "a", "0.24.0"), "0.24.0")
    assert old.BlockPool.LABEL == "0.24.0" and new.BlockPool.LABEL == "0.33.0"
    assert old.BlockPool is not new.BlockPool
    assert again.BlockPool is not old.BlockPool  # a fresh, independent load
    assert old.kv_cache_utils.KVCacheBlock is not new.kv_cache_utils.KVCacheBlock
    # each release's pool builds its own release's blocks
    assert isinstance(old.BlockPool(2, True).blocks[0], old.kv_cache_utils.KVCacheBlock)


def test_an_installed_vllm_is_not_shadowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = types.ModuleType("vllm")
    real.__path__ = []  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", real)
    release = load_release(make_tree(tmp_path, "0.33.0"), "0.33.0")
    assert sys.modules["vllm"] is real
    assert release.modules["vllm"] is not real


def test_a_file_importing_torch_fails_with_the_file_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # as above: this load is checked
    tree = make_tree(tmp_path, "0.33.0", pool="import torch\n" + POOL)
    with pytest.raises(IsolationError, match="imports torch"):
        load_release(tree, "0.33.0")
    assert "torch" not in sys.modules
    assert not vllm_modules()


def test_a_failing_file_is_named_with_its_line(tmp_path: Path) -> None:
    tree = make_tree(tmp_path, "0.33.0", pool=POOL + "\nraise RuntimeError('boom')\n")
    with pytest.raises(IsolationError, match=r"vllm/v1/core/block_pool.py line \d+.*boom"):
        load_release(tree, "0.33.0")
    assert not vllm_modules()


def test_a_tree_without_a_block_pool_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match=re.escape("block_pool.py")):
        load_release(tmp_path, "0.33.0")


def test_placeholders_are_inert() -> None:
    log = PlaceholderLog()
    thing = Placeholder("vllm.config.VllmConfig", log)
    assert not thing and len(thing) == 0 and list(thing) == [] and 1 not in thing
    assert isinstance(thing(1, x=2), Placeholder)
    assert thing[int] is thing and (thing | None) is thing and (None | thing) is thing
    assert not isinstance(3, thing)  # type: ignore[arg-type]
    assert isinstance(thing.some.deep.attr, Placeholder)

    def function() -> int:
        return 1

    assert thing(function) is function

    class Sub(thing):  # type: ignore[misc,valid-type]
        pass

    assert isinstance(Sub(), thing)  # type: ignore[arg-type]
    assert "vllm.config.VllmConfig.some" in log.at_load


USES: dict[str, Callable[[Any], object]] = {
    "called": lambda p: p(),
    "indexed": lambda p: p[0],
    "iterated": lambda p: list(p),
    "compared": lambda p: p == 1,
    "attribute-read": lambda p: p.late,
    "truth-tested": lambda p: bool(p),
    "measured": lambda p: len(p),
    "searched": lambda p: 1 in p,
    "isinstance": lambda p: isinstance(1, p),
}


@pytest.mark.parametrize("use", sorted(USES))
def test_a_placeholder_used_after_loading_refuses_naming_its_module(use: str) -> None:
    log = PlaceholderLog(version="9.9.9")
    log.modules.add("vllm.config")
    thing = Placeholder("vllm.config.VllmConfig", log)
    log.loading = False
    with pytest.raises(
        PlaceholderUsed, match=r"vLLM 9\.9\.9 uses vllm\.config\.VllmConfig"
    ) as caught:
        USES[use](thing)
    assert "vllm.config is a placeholder" in str(caught.value)
    assert log.used is not None
    with pytest.raises(PlaceholderUsed):  # a release that swallowed it is stopped again
        log.raise_if_used()


def test_init_logger_gives_a_quiet_logger_with_once_methods(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = init_logger("vllm.v1.core.block_pool")
    with caplog.at_level(logging.INFO, logger="kvpool.vllm"):
        logger.info("hello %s", "pool")
        logger.warning_once("only once")
        logger.warning_once("only once")
    assert [r.getMessage() for r in caplog.records] == ["hello pool", "only once"]
    assert caplog.records[0].name == "kvpool.vllm.vllm.v1.core.block_pool"
