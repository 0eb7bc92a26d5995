"""The bench page's managers table: computed from the recorded runs, never typed in."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kvpool.conformance.tools.reference.bench_record import (
    DATA,
    BenchRecordError,
    load,
    managers_table,
    parse,
)
from kvpool.conformance.tools.reference.fragments import DOCS


def _run(ours: list[float], vllm: list[float]) -> dict[str, Any]:
    return {
        "schema": "kvpool-bench/1",
        "level": "manager",
        "verified": True,
        "pools": {"ours": "ours KVCacheManager", "vllm": "vllm==0.33.0 KVCacheManager"},
        "repeat": len(ours),
        "results": [
            {
                "workload": "requests",
                "num_gpu_blocks": 1000,
                "calls": 2000,
                "ours_seconds": ours,
                "vllm_seconds": vllm,
            }
        ],
    }


def _record(*runs: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": "kvpool-bench-record/1",
        "command": "kvpool bench --manager vllm --target vllm==0.33.0",
        "commit": "abc1234",
        "date": "2026-12-01",
        "machine": "2 cores",
        "runs": list(runs),
    }


def test_figures_are_medians_of_the_recorded_seconds_low_high_over_runs() -> None:
    record = parse(_record(_run([1.0, 2.0, 4.0], [2.0, 2.0, 2.0]), _run([1.0] * 3, [3.0] * 3)))
    (figure,) = record.figures
    assert figure.ours == (1000.0, 2000.0)  # 2000 steps / median seconds (2.0, then 1.0)
    assert figure.vllm == (1000.0, 2000 / 3)
    assert figure.ratio == (1.0, 3.0)  # medians of (2.0, 1.0, 0.5) and of (3.0, 3.0, 3.0)
    assert figure.fastest == (2.0, 3.0)  # vLLM's fastest over ours': 2.0 / 1.0, 3.0 / 1.0
    out = managers_table(record)
    row = "| `requests` | 1,000 | 2,000 | 1,000-2,000 | 667-1,000 | **1.00-3.00** | 2.00-3.00 |"
    assert row.replace("-", "\N{EN DASH}") in out
    assert (
        "2 runs of `kvpool bench --manager vllm --target vllm==0.33.0` at commit `abc1234`" in out
    )


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda r: r.update(schema="x"), "not a kvpool-bench-record/1 record"),
        (lambda r: r["runs"].clear(), "no runs"),
        (lambda r: r["runs"][0].update(verified=False), "not a verified --manager vllm report"),
        (lambda r: r["runs"][0].update(level="pool"), "not a verified --manager vllm report"),
        (lambda r: r["runs"][0]["results"][0].update(ours_seconds=[]), "ours_seconds"),
        (lambda r: r["runs"][0]["results"][0].update(vllm_seconds=[1.0, 2.0]), "as many"),
        (lambda r: r["runs"][1]["pools"].update(vllm="vllm==0.30.0"), "different managers"),
        (lambda r: r["runs"][1]["results"].clear(), "not in every run"),
        (lambda r: r.pop("commit"), "'commit' must be a str"),
    ],
)
def test_a_malformed_record_is_refused_saying_where(damage: Any, says: str) -> None:
    data = _record(_run([1.0], [2.0]), _run([1.0], [2.0]))
    broken = copy.deepcopy(data)
    damage(broken)
    with pytest.raises(BenchRecordError, match=says.replace("(", r"\(")):
        parse(broken)


def test_the_committed_record_is_verified_runs_of_both_timings_saying_what_the_page_says() -> None:
    record = load(DOCS)
    assert record.vllm.startswith("vllm==0.33.0") and record.commit
    timed = {(f.workload, f.num_gpu_blocks) for f in record.figures}
    sizes = {n for _, n in timed}
    long_sizes = {n for n in sizes if n >= 8_200}
    ways = ("", ", prehashed", ", ours on the spec's hashing")
    assert timed == {(f"requests{w}", n) for w in ways for n in sizes} | {
        (f"long prompts{w}", n) for w in ways for n in long_sizes
    }
    runs = json.loads((DOCS / DATA).read_text())["runs"]
    assert len(runs) >= 2 and all(run["verified"] and not run["disagreements"] for run in runs)
    # the page's reading of the table (in every run): handed the digests ours is faster
    # everywhere; hashing as the release does, the bench's ratio meets 1.5 at every size
    # and on the long prompts, and so do the fastest repetitions but at 100k blocks (1.48
    # in one run there); on the spec's hashing it is no faster on long prompts
    for figure in record.figures:
        if figure.workload.endswith("prehashed"):
            assert min(figure.ratio) > 1, figure
        elif figure.workload in ("requests", "long prompts"):
            assert min(figure.ratio) >= 1.5, figure
            if figure.num_gpu_blocks == 100_000 and figure.workload == "requests":
                assert max(figure.fastest) >= 1.5 > min(figure.fastest), figure
            else:
                assert min(figure.fastest) >= 1.5, figure
        elif figure.workload.startswith("long prompts"):
            assert max(figure.ratio) <= 1.0, figure
