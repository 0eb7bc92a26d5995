"""The bench page's pool tables: taken from the recorded runs, never typed in."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from kvpool.conformance.tools.reference.bench_record import BenchRecordError
from kvpool.conformance.tools.reference.fragments import DOCS, expand
from kvpool.conformance.tools.reference.pool_record import growth_table, load, parse, pools_table

DASH = "\N{EN DASH}"


def _result(workload: str, blocks: int, ratio: float, compiled: float) -> dict[str, Any]:
    return {
        "workload": workload,
        "num_gpu_blocks": blocks,
        "ratio": ratio,
        "compiled_ratio": compiled,
        "ours_ops_per_s": 1_000_000 * ratio,
        "vllm_ops_per_s": 1_000_000,
        "compiled_ops_per_s": 1_000_000 * compiled,
    }


def _run(churn: float, hits: float) -> dict[str, Any]:
    return {
        "schema": "kvpool-bench/1",
        "level": "pool",
        "verified": True,
        "results": [
            _result("churn", 1000, churn, 8.0),
            _result("prefix-hit", 1000, hits, 2.5),
            _result("churn", 1_000_000, churn - 0.1, 6.0),
            _result("prefix-hit", 1_000_000, hits - 0.2, 1.9),
        ],
        "memory": [
            {
                "num_gpu_blocks": 1000,
                "ours_bytes_per_block": 185.2,
                "vllm_bytes_per_block": 240.0,
                "compiled_bytes_per_block": 169.0,
            }
        ],
    }


def _record() -> dict[str, Any]:
    return {
        "schema": "kvpool-bench-record/1",
        "command": "kvpool bench --compiled --json",
        "commit": "abc1234",
        "date": "2026-12-02",
        "machine": "2 cores",
        "runs": [_run(2.3, 1.6), _run(2.4, 1.5)],
    }


def test_the_tables_show_each_cell_over_the_runs_bold_under_the_aim() -> None:
    shown = pools_table(parse(_record()))
    # churn: 2.3 and 2.4 at 1k, 2.2 and 2.3 at 1M; compiled 8 and 6; prefix hits under 2x
    assert f"| allocate/free churn | 2.30{DASH}2.40 | 2.20{DASH}2.30 | 8.00 | 6.00 |" in shown
    hits = "| prefix hits (lookups, touches of free cached blocks) |"
    assert f"{hits} **1.50{DASH}1.60** | **1.30{DASH}1.40** | 2.50 | **1.90** |" in shown
    assert "| 1,000 | 185 | 169 | 240 |" in shown
    assert f"| `churn` | 2.30{DASH}2.40 / 1.00 / 8.00 | 2.20{DASH}2.30 / 1.00 / 6.00 |" in shown
    assert "From 2 runs of `kvpool bench --compiled --json` at commit `abc1234`" in shown


def _broken(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(_record())
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("schema"), "not a kvpool-bench-record/1 record"),
        (lambda d: d.update(runs=[]), "record: no runs"),
        (lambda d: d["runs"][0].update(level="manager"), "run 0: not a verified report"),
        (lambda d: d["runs"][1].update(verified=False), "run 1: not a verified report"),
        (
            lambda d: d["runs"][0]["results"][0].update(ratio=0),
            "run 0, result 0: 'ratio' must be a positive number, not 0",
        ),
        (
            lambda d: d["runs"][0]["results"][1].update(workload="other"),
            "run 0, result 1: no workload 'other'",
        ),
        (
            lambda d: d["runs"][1]["results"].pop(),
            "record: prefix-hit @ 1000000 is not in every run",
        ),
        (lambda d: d["runs"][1]["memory"].clear(), "record: memory @ 1000 is not in every run"),
        (
            lambda d: d["runs"][0]["memory"][0].update(vllm_bytes_per_block="x"),
            "run 0, memory 0: 'vllm_bytes_per_block' must be a positive number",
        ),
    ],
)
def test_a_malformed_record_is_refused_saying_where(change: Any, message: str) -> None:
    with pytest.raises(BenchRecordError, match="^" + re.escape(message)):
        parse(_broken(change))


def test_the_docs_record_renders_on_the_bench_page() -> None:
    record = load(DOCS)
    assert record.runs >= 3  # a spread, not one lucky run
    assert {c.workload for c in record.cells} == {"churn", "prefix-hit", "cache-full", "requests"}
    assert {c.num_gpu_blocks for c in record.cells} == {1000, 100_000, 1_000_000}
    page = (DOCS / "workflow" / "bench.md").read_text()
    assert "<!-- kvpool:pool-bench -->" in page
    assert pools_table(record) in expand(page, "workflow/bench.md")


# --- the growth from the smallest pool to the largest ----------------------------------


def _growth(ours_added: float, vllm_added: float) -> dict[str, Any]:
    return {
        "prefix-hit": {
            "from": 1000,
            "to": 1_000_000,
            "ours": 2.0,
            "vllm": 1.5,
            "ours_added_us": ours_added,
            "vllm_added_us": vllm_added,
        }
    }


def test_the_growth_table_counts_the_runs_where_ours_added_more() -> None:
    data = _record()
    data["runs"][0]["growth"] = _growth(0.40, 0.30)
    data["runs"][1]["growth"] = _growth(0.20, 0.35)
    shown = growth_table(parse(data))
    assert f"0.20{DASH}0.40 / 0.30{DASH}0.35" in shown
    assert "| 1 of 2 |" in shown


def test_a_run_without_the_growth_the_others_have_is_refused() -> None:
    data = _record()
    data["runs"][0]["growth"] = _growth(0.40, 0.30)
    with pytest.raises(BenchRecordError, match="growth of prefix-hit is not in every run"):
        parse(data)


def test_the_committed_record_renders_its_growth() -> None:
    assert "runs where ours added more" in growth_table(load(DOCS))
