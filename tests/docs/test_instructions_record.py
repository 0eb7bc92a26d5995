"""The bench page's instruction counts: rendered from the callgrind counts kept in
``docs/data/bench-instructions.json``, every ratio computed from them, never typed in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kvpool.conformance.tools.reference.fragments import DOCS
from kvpool.conformance.tools.reference.instructions_record import (
    POOLS,
    InstructionsRecordError,
    instructions_table,
    load,
    parse,
)


def _record() -> dict[str, Any]:
    counted = {"ours": 10_000_000, "vllm": 24_000_000, "floor": 8_000_000}
    return {
        "schema": "kvpool-bench-instructions-record/1",
        "command": "valgrind --tool=callgrind python -m kvpool.conformance.tools.bench.instructions",  # noqa: E501
        "commit": "abc1234",
        "date": "2026-12-07",
        "machine": "2 cores, x86_64, Python 3.11.7",
        "size": 1000,
        "counts": [
            {"workload": "churn", "pool": pool, "calls": 2000, "instructions": n}
            for pool, n in counted.items()
        ],
    }


def test_per_call_counts_and_ratios_are_computed_from_the_counts() -> None:
    shown = instructions_table(parse(_record()))
    assert "| workload, 1,000 blocks | ours | vllm | floor | vLLM / ours | vLLM / floor |" in shown
    assert "| churn | 5,000 | 12,000 | 4,000 | 2.40 | 3.00 |" in shown
    assert "at commit `abc1234` on 2026-12-07" in shown


def test_the_committed_record_renders_every_pool_of_every_workload() -> None:
    record = load(DOCS)
    shown = instructions_table(record)
    for count in record.counts:
        assert count.pool in POOLS and f"| {count.workload} |" in shown


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema="x/1"), "not a kvpool-bench-instructions-record/1 record"),
        (lambda d: d.update(counts=[]), "record: no counts"),
        (lambda d: d["counts"].pop(), "churn has pools ours, vllm, not ours, vllm, floor"),
        (lambda d: d["counts"][0].update(calls=0), "count 0: calls and instructions must be"),
        (lambda d: d["counts"][1].update(instructions="7"), "count 1: 'instructions' must be"),
        (lambda d: d.update(size=True), "record: 'size' must be a int, not True"),
    ],
)
def test_a_malformed_record_is_refused_naming_where(change: Any, message: str) -> None:
    data = copy.deepcopy(_record())
    change(data)
    with pytest.raises(InstructionsRecordError, match=message):
        parse(data)
