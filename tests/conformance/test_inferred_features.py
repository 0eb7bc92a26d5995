"""What the suite infers from a pool's names is printed in the run's header with where it
was found, can be declared off by the pool, and never produces a finding on a name alone:
a block attribute named ``pool`` turns on foreign-pool routing only when the pool routes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm_api import detection
from kvpool.conformance.engines.vllm_api.adapter import VllmApiTarget
from kvpool.conformance.engines.vllm_api.features import FEATURES, FeatureDeclarationError
from kvpool.conformance.machines.pool.target import EVICT_FIRST
from kvpool.conformance.usage import EXIT_FINDING, EXIT_PASS, EXIT_USAGE
from kvpool.impl import BlockPool
from kvpool.spec import SEED, PoolConfig

HERE = Path(__file__).parent
RUN = ["conform", "--no-coverage", "--machine", "pool", "--level", "safety", "--seed", "1"]
RUN += ["--max-examples", "150"]


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)
    detection._DETECTED.clear()  # each test reads its pool afresh, and leaves nothing
    yield
    detection._DETECTED.clear()


def conform(target: str) -> Result:
    return CliRunner().invoke(
        main,
        [*RUN, "--target", target],
        env={"COLUMNS": "200"},
    )


def header(output: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("inferred from"))
    return [line.strip() for line in lines[start + 1 :] if line.startswith("  ")][:12]


def test_a_pool_attribute_that_does_not_route_gives_no_finding() -> None:
    result = conform("linked_pool:LinkedPool")
    assert result.exit_code == EXIT_PASS, result.output
    assert "ref_cnt: blocks[i].ref_cnt" in header(result.output)
    assert any(
        line.startswith("not inferred: foreign_pool: blocks[0].pool is there")
        for line in header(result.output)
    ), result.output
    assert "peer pool" not in result.output


def test_the_planted_inference_from_the_name_alone_gives_false_findings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fault the issue found, planted: routing taken from the attribute alone."""
    monkeypatch.setattr(
        detection, "foreign_pool_routing", lambda *_: (detection.ROUTING_FOUND, None)
    )
    result = conform("linked_pool:LinkedPool")
    assert result.exit_code == EXIT_FINDING, result.output
    assert "foreign_pool: blocks[0].pool names its pool" in result.output
    assert "peer pool" in result.output or "refused although it is allowed" in result.output


def test_a_pool_that_routes_is_detected_and_says_where() -> None:
    target = VllmApiTarget(BlockPool, PoolConfig(4), SEED)
    found = {f.name: f.where for f in target.features}
    assert found["foreign_pool"] == detection.ROUTING_FOUND
    assert found["evict_first"] == "free_blocks(evict_first=...)"
    assert found["block_mask"] == "cache_full_blocks(block_mask=...)"
    assert set(found) <= set(FEATURES)
    assert "peer_get_new_blocks" in target.operations


def make_pool(**kwargs: object) -> BlockPool:
    return BlockPool(**kwargs)  # type: ignore[arg-type]


def test_features_declared_off_are_not_checked() -> None:
    make_pool.kvpool_features_off = {"foreign_pool", "evict_first", "ref_cnt"}  # type: ignore[attr-defined]
    try:
        target = VllmApiTarget(make_pool, PoolConfig(4), SEED)
    finally:
        del make_pool.kvpool_features_off  # type: ignore[attr-defined]
    names = {f.name for f in target.features}
    assert not names & {"foreign_pool", "evict_first", "ref_cnt"}
    assert "peer_get_new_blocks" not in target.operations
    assert EVICT_FIRST not in target.operations
    assert "ref_cnt" not in target.observes and "keys" in target.observes
    declared = "declared off (kvpool_features_off): evict_first, foreign_pool, ref_cnt"
    assert declared in [line.strip() for line in target.header_lines()]


@pytest.mark.parametrize("value", ["foreign_pool", {"no_such_feature"}, 3])
def test_a_malformed_declaration_is_a_clear_error(value: object) -> None:
    make_pool.kvpool_features_off = value  # type: ignore[attr-defined]
    try:
        with pytest.raises(FeatureDeclarationError, match="kvpool_features_off"):
            VllmApiTarget(make_pool, PoolConfig(4), SEED)
    finally:
        del make_pool.kvpool_features_off  # type: ignore[attr-defined]


def test_a_malformed_declaration_exits_2() -> None:
    (Path.cwd() / "declared_pool.py").write_text(
        "from kvpool.impl import BlockPool\n"
        "def make_pool(**kwargs):\n"
        "    return BlockPool(**kwargs)\n"
        "make_pool.kvpool_features_off = {'foreign-pool'}\n"
    )
    import sys

    sys.path.insert(0, str(Path.cwd()))
    try:
        result = conform("declared_pool:make_pool")
    finally:
        sys.path.remove(str(Path.cwd()))
        sys.modules.pop("declared_pool", None)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "unknown feature(s) foreign-pool" in result.output
