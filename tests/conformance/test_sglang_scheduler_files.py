"""SGLang 0.5.23's scheduler files load from the release's wheel and run on CPU: its own
``Req`` finds its prefix in its own ``RadixCache`` (``init_next_round_input``, the
max-prefix cap of ``_compute_max_prefix_len``), and a fault planted in a copy of
``schedule_batch.py`` changes what it finds, so the code that runs is the release's.

Needs the ``sglang`` extra (torch) and the release's files (downloaded into the cache
once); a few seconds."""

from __future__ import annotations

import shutil
from array import array
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="SGLang's allocator needs torch: pip install -e '.[sglang]'")

from kvpool.conformance.engines.sglang.scheduler_release import (
    SglangScheduler05,
    load_scheduler_tree,
    scheduler_files,
)
from kvpool.conformance.targets.releases.files import cached_files

VERSION = "0.5.23"
PROMPT = (1, 2, 3, 4, 5)


@pytest.fixture(scope="module")
def root() -> Path:
    return cached_files(scheduler_files(), VERSION)


def hit_after_caching(release: SglangScheduler05) -> int:
    """A 5-token prompt's KV put in the release's tree, then the same prompt asked for
    by a new ``Req``: the prefix ``init_next_round_input`` grants it."""
    import torch

    modules = release.modules
    with release.active():
        allocator = modules["sglang.srt.mem_cache.allocator"].TokenToKVPoolAllocator(
            16, torch.float16, "cpu", None, False
        )
        pool = release.defined["srt/mem_cache/memory_pool.py"]["ReqToTokenPool"]
        params = modules["sglang.srt.mem_cache.cache_init_params"].CacheInitParams(
            disable=False,
            req_to_token_pool=pool(4, 64, "cpu", False),
            token_to_kv_pool_allocator=allocator,
            page_size=1,
        )
        radix = modules["sglang.srt.mem_cache.radix_cache"]
        tree: Any = radix.RadixCache(params)
        base = modules["sglang.srt.mem_cache.base_prefix_cache"]
        key = radix.RadixKey(array("q", PROMPT))
        tree.insert(base.InsertParams(key=key, value=allocator.alloc(len(PROMPT))))
        sampling = release.sampling_params.SamplingParams(max_new_tokens=2)
        req = release.schedule_batch.Req("r", "", array("q", PROMPT), sampling)
        req.init_next_round_input(tree)
        return int(req.prefix_len)


def test_the_release_req_finds_its_prefix_but_the_last_token(root: Path) -> None:
    release = load_scheduler_tree(root, f"sglang {VERSION}")
    assert release.schedule_batch.Req.__init__.__code__.co_filename.startswith(str(root))
    assert hit_after_caching(release) == len(PROMPT) - 1  # the last token is computed


def test_a_fault_planted_in_schedule_batch_changes_the_hit(root: Path, tmp_path: Path) -> None:
    shutil.copytree(root / "sglang", tmp_path / "sglang")
    path = tmp_path / "sglang" / "srt" / "managers" / "schedule_batch.py"
    source = path.read_text(encoding="utf-8")
    cap = "        max_prefix_len = input_len - 1\n"
    assert source.count(cap) == 1
    path.write_text(source.replace(cap, "        max_prefix_len = input_len\n"), "utf-8")
    planted = load_scheduler_tree(tmp_path, "sglang with a planted fault")
    assert hit_after_caching(planted) == len(PROMPT)  # the whole prompt: nothing to compute
