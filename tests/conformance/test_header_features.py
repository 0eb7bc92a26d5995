"""The run header says what was inferred from the pool's names: for kvpool's own pools in
one line (where each was found: ``--plan``), for anyone else's pool each feature and
where it was found, as the extension-API page says."""

from __future__ import annotations

from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm_api.adapter import VllmApiTarget
from kvpool.conformance.engines.vllm_api.features import FEATURES, inferred_lines
from kvpool.impl import BlockPool
from kvpool.spec import SEED, PoolConfig

RUN = ["conform", "--no-coverage", "--machine", "pool", "--level", "safety", "--seed", "1"]


def header(target: str, *extra: str) -> list[str]:
    result = CliRunner().invoke(main, [*RUN, "--max-examples", "3", "--target", target, *extra])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if "inferred from the pool's names" in line)
    return [lines[start], *(line for line in lines[start + 1 :] if line.startswith("  "))]


def test_our_own_pool_gets_one_line_naming_every_feature() -> None:
    (line,) = [text for text in header("impl") if not text.startswith("  ")]
    assert line.startswith("inferred from the pool's names (where each was found: --plan): ")
    for name in FEATURES:
        assert name in line
    assert "ref_cnt: blocks[i].ref_cnt" not in "\n".join(header("impl"))


def test_someone_elses_pool_gets_each_feature_and_where_it_was_found() -> None:
    lines = header("kvpool.impl:BlockPool")
    assert lines[0].startswith("inferred from the pool's names (declare any off")
    assert "  ref_cnt: blocks[i].ref_cnt" in lines
    assert "  index: cached_block_hash_to_block, read whole" in lines


def test_the_plan_says_where_each_feature_of_our_own_pool_was_found() -> None:
    result = CliRunner().invoke(main, [*RUN, "--target", "impl", "--plan"])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("  inferred ")]
    assert "ref_cnt: blocks[i].ref_cnt; " in line
    assert "free_queue: free_block_queue, walked by its links; " in line


def make_pool(**kwargs: object) -> BlockPool:
    return BlockPool(**kwargs)  # type: ignore[arg-type]


def test_the_short_form_keeps_what_was_declared_off() -> None:
    make_pool.kvpool_features_off = {"ref_cnt"}  # type: ignore[attr-defined]
    try:
        target = VllmApiTarget(make_pool, PoolConfig(4), SEED)
    finally:
        del make_pool.kvpool_features_off  # type: ignore[attr-defined]
    short = inferred_lines(target, engine="impl")
    assert "ref_cnt" not in short[0]
    assert "  declared off (kvpool_features_off): ref_cnt" in short
    assert inferred_lines(target, engine="impl", in_full=True) == target.header_lines()
