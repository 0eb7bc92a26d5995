"""vLLM 0.10.2's known findings (``findings/vllm-0.10.2/expect.toml``) keep its run
passing, and a new fault planted in a copy of its tree still fails it.

The command it stands for is ``kvpool conform --target vllm==0.10.2 --machine pool
--expect findings/vllm-0.10.2/expect.toml``, here at the safety level alone (the file's
entries for other levels are not asked of it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from index_faults import planted_vllm_tree  # on sys.path via pytest
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm.distribution import cached_release
from kvpool.conformance.usage import EXIT_FINDING, EXIT_PASS

EXPECT = Path(__file__).resolve().parents[2] / "findings" / "vllm-0.10.2" / "expect.toml"
#: vLLM 0.10.2's reset_prefix_cache without the line that clears its index.
RESET_KEEPS_INDEX = ("        self.cached_block_hash_to_block = defaultdict(dict)\n", "")


@pytest.fixture(autouse=True)
def _in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)


def conform(target: str) -> Result:
    args = ["conform", "--target", target, "--profile", "vllm-0.10", "--machine", "pool"]
    args += ["--level", "safety", "--seed", "1", "--no-coverage", "--expect", str(EXPECT)]
    return CliRunner().invoke(main, args)


def test_the_release_passes_with_its_known_findings() -> None:
    result = conform("vllm==0.10.2")
    assert result.exit_code == EXIT_PASS, result.output
    assert "every run passed" in result.output
    assert "null-block-inert" in result.output  # met, and counted in the table


def test_a_new_fault_behind_the_known_ones_fails_the_run(tmp_path: Path) -> None:
    tree = planted_vllm_tree(cached_release("0.10.2"), tmp_path, RESET_KEEPS_INDEX)
    result = conform(f"vllm@{tree}")
    assert result.exit_code == EXIT_FINDING, result.output
    assert "Nonconformance: pool/safety" in result.output
    assert "map-matches-block-keys" in result.output or "lookup" in result.output
