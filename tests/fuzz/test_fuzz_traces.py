"""A finding's trace is written once per kind of failure, however many workers see it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kvpool.conformance.machines.pool.runner import Failure
from kvpool.conformance.tools.fuzz.plan import CampaignPlan, DatabaseSpec, JobSpec
from kvpool.conformance.tools.fuzz.traces import save_finding, trace_path
from kvpool.conformance.trace.files import read_trace
from kvpool.spec import GetNewBlocks, PoolConfig

PLAN = CampaignPlan(
    target="impl",
    profile="seed",
    manager="impl",
    jobs=(JobSpec("pool", "safety"),),
    steps=10,
    blocks=8,
    request_blocks=12,
    examples_per_round=10,
    trace_dir="traces",
    database=DatabaseSpec("db"),
    seed=1,
)
SAFETY = JobSpec("pool", "safety")


def failure(message: str, blocks: int = 1) -> Failure:
    return Failure(message, (GetNewBlocks(blocks),), PoolConfig(4))


def test_the_first_sighting_writes_the_trace_and_later_ones_leave_it(tmp_path: Path) -> None:
    plan = replace(PLAN, trace_dir=str(tmp_path))
    first = failure("after touch: free count: expected 0, got 1")
    path, written = save_finding(plan, SAFETY, first, 7, None)
    assert written and path.exists()
    assert path.name.startswith("impl-pool-safety-fuzz-")
    assert (tmp_path / f"test_{path.name.removesuffix('.itf.json').replace('-', '_')}.py").exists()
    text = path.read_text()
    # the same kind seen again, with other details and another seed: left alone
    again = failure("after touch: free count: expected 2, got 3", blocks=2)
    assert save_finding(plan, SAFETY, again, 8, None) == (path, False)
    assert path.read_text() == text
    assert read_trace(path).meta.message == first.message
    other, written = save_finding(
        plan, SAFETY, failure("get_usage: expected 0.5, got 0.25"), 9, None
    )
    assert written and other != path


def test_names_tell_jobs_and_managers_apart() -> None:
    message = "property 'tail-first-free' broken"
    on_pool = trace_path(PLAN, JobSpec("requests", "pool"), message)
    on_manager = trace_path(PLAN, JobSpec("requests", "manager"), message)
    other_manager = trace_path(
        replace(PLAN, manager="mymgr:make"), JobSpec("requests", "manager"), message
    )
    assert len({on_pool, on_manager, other_manager}) == 3
    assert "manager_mymgr_make" in other_manager.name
