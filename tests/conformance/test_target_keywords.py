"""A ``module:factory`` pool must take the four keywords the suite builds pools with; one
that cannot is refused before anything runs, naming what it lacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.targets.factory_entry import POOL_KEYWORDS, keywords_not_taken


def three(num_gpu_blocks: int, enable_caching: bool, hash_block_size: int) -> None: ...


def keyword_only(
    *, num_gpu_blocks: int, enable_caching: bool, hash_block_size: int, enable_kv_cache_events: bool
) -> None: ...


def positional_only(
    num_gpu_blocks: int, /, enable_caching: bool, hash_block_size: int, enable_kv_cache_events: bool
) -> None: ...


def any_keyword(num_gpu_blocks: int, **options: Any) -> None: ...


@pytest.mark.parametrize(
    ("factory", "missing"),
    [
        (three, ["enable_kv_cache_events"]),
        (keyword_only, []),
        (positional_only, ["num_gpu_blocks"]),
        (any_keyword, []),
        (lambda: None, list(POOL_KEYWORDS)),
    ],
)
def test_the_keywords_a_factory_cannot_take(factory: Any, missing: list[str]) -> None:
    assert keywords_not_taken(factory) == missing


def test_a_factory_missing_a_keyword_is_a_usage_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "narrowpool.py").write_text(
        "from kvpool.impl import BlockPool\n\n\n"
        "def make_pool(num_gpu_blocks, enable_caching):\n"
        "    return BlockPool(num_gpu_blocks, enable_caching)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    result = CliRunner().invoke(main, ["conform", "--target", "narrowpool:make_pool"])
    assert result.exit_code == 2, result.output
    assert "'narrowpool:make_pool' cannot take hash_block_size, enable_kv_cache_events" in (
        " ".join(result.output.split())
    )
    assert "Traceback" not in result.output
