"""The pool in C passes every level it declares over the wire protocol, and each of the
three faults planted in it is caught on seeds 1-3 with a shrunk trace that replays (seed 1
in the default run, the CPU budget; ``KVPOOL_LONG=1`` adds seeds 2-3)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import FAULTS
from kvpool.conformance.cli import main
from kvpool.conformance.usage import EXIT_FINDING, EXIT_PASS

LONG = os.environ.get("KVPOOL_LONG", "") not in ("", "0")
#: Seed 1 in the default run; seeds 2-3 with ``KVPOOL_LONG=1`` (about 1.5 CPU-s a run).
SEEDS = [
    1,
    *(pytest.param(s, marks=pytest.mark.skipif(not LONG, reason="KVPOOL_LONG=1")) for s in (2, 3)),
]

#: The level that catches each planted fault (the others may too, or may not reach it).
CAUGHT_AT = {
    "FAULT_DOUBLE_HANDOUT": "safety",
    "FAULT_UNKEYED_TO_BACK": "order",
    "FAULT_ACCEPT_OVERFREE": "robustness",
}


def conform(program: Path, *args: str) -> Result:
    return CliRunner().invoke(
        main,
        ["conform", "--no-coverage", "--target", f"exec:{program}", "--machine", "pool", *args],
    )


def test_the_c_pool_passes_every_level_it_declares(
    build_c_pool: Callable[[str | None], Path],
) -> None:
    result = conform(build_c_pool(None), "--seed", "1", "--max-examples", "60")
    assert result.exit_code == EXIT_PASS, result.output
    for level in ("safety", "order", "robustness", "events (count)"):
        assert f"pool/{level}" in result.output
    assert "profile seed (the profile program 'kvpool_c' names in its handshake)" in result.output


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fault", FAULTS)
def test_each_planted_fault_is_caught_with_a_shrunk_trace(
    build_c_pool: Callable[[str | None], Path], fault: str, seed: int, tmp_path: Path
) -> None:
    program = build_c_pool(fault)
    level = CAUGHT_AT[fault]
    result = conform(program, "--seed", str(seed), "--level", level, "--trace-dir", "traces")
    assert result.exit_code == EXIT_FINDING, result.output
    assert f"Nonconformance: pool/{level}" in result.output
    assert "Shrunk action sequence" in result.output
    traces = sorted((tmp_path / "traces").glob("*.itf.json"))
    assert traces, result.output
    document = json.loads(traces[0].read_text())
    assert 1 <= len(document["states"]) - 1 <= 8  # shrunk: a handful of actions
    assert document["#meta"]["kvpool"]["target"] == f"exec:{program}"


def test_a_faults_trace_replays_against_the_faulty_and_the_correct_pool(
    build_c_pool: Callable[[str | None], Path], tmp_path: Path
) -> None:
    faulty = build_c_pool("FAULT_UNKEYED_TO_BACK")
    found = conform(faulty, "--seed", "1", "--level", "order", "--trace-dir", "traces")
    assert found.exit_code == EXIT_FINDING, found.output
    trace = str(next((tmp_path / "traces").glob("*.itf.json")))
    runner = CliRunner()
    still = runner.invoke(main, ["replay", trace, "--target", f"exec:{faulty}"])
    assert still.exit_code == EXIT_FINDING, still.output
    assert "free queue order" in still.output
    fixed = runner.invoke(main, ["replay", trace, "--target", f"exec:{build_c_pool(None)}"])
    assert fixed.exit_code == EXIT_PASS, fixed.output
