"""Shrinking is a feature: every planted fault shrinks to a short trace (median <= 8)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from kvpool.conformance.machines.pool.levels import LEVELS
from kvpool.conformance.machines.pool.runner import run_level
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.targets.loading import load_target
from kvpool.spec import SEED

HERE = Path(__file__).parent


def test_planted_faults_shrink_to_a_median_of_at_most_8_actions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    import faulty_managers
    from faulty_pools import CAUGHT_AT

    lengths: dict[str, int] = {}
    for fault, level in CAUGHT_AT.items():
        factory, _ = load_target(f"faulty_pools:{fault}")
        result = run_level(
            factory, SEED, LEVELS[level], max_examples=400, steps=30, seed=11, max_blocks=8
        )
        assert result.failure is not None, fault
        lengths[fault] = len(result.failure.trace)
    for fault in faulty_managers.CAUGHT_BY:
        build = manager_builder(getattr(faulty_managers, f"make_{fault}"), SEED)
        result = run_requests(build, ON_MANAGER, max_examples=300, steps=40, seed=1, max_blocks=12)
        assert result.failure is not None, fault
        lengths[fault] = len(result.failure.trace)
    report = ", ".join(f"{name} {n}" for name, n in lengths.items())
    print(f"shrunk trace lengths: {report}")
    assert statistics.median(lengths.values()) <= 8, report
    assert max(lengths.values()) <= 12, report
