"""The targets page's table of every engine's newest release: rendered from the recorded
``kvpool targets --latest --json`` run, never typed in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kvpool.conformance.tools.reference.fragments import DOCS
from kvpool.conformance.tools.reference.latest_record import (
    LatestRecordError,
    latest_table,
    load,
    parse,
)


def _record() -> dict[str, Any]:
    row = {"project": "x", "reason": "", "commands": []}
    return {
        "schema": "kvpool-latest-record/1",
        "command": "kvpool targets --latest --json",
        "commit": "abc1234",
        "date": "2026-12-07",
        "machine": "2 cores, x86_64, Python 3.11.7",
        "rows": [
            {**row, "engine": "vllm", "newest": "0.34.0", "supported": "yes",
             "result": "findings", "rules": ["touch-identity"], "missing": "",
             "profile": "vllm-0.34"},
            {**row, "engine": "lmdeploy", "newest": "0.19.0", "supported": "no",
             "result": "refused", "rules": [], "missing": "could not download", "profile": "-"},
            {**row, "engine": "sglang", "newest": "0.5.23", "supported": "yes",
             "result": "pass", "rules": [], "missing": "", "profile": "seed"},
        ],
    }  # fmt: skip


def test_the_table_says_ran_or_refused_with_the_rules_or_the_reason() -> None:
    shown = latest_table(parse(_record()))
    assert "| `vllm` | `0.34.0` | yes | findings: `touch-identity` | `vllm-0.34` |" in shown
    assert "| `lmdeploy` | `0.19.0` | refused | could not download | `-` |" in shown
    assert "| `sglang` | `0.5.23` | yes | pass | `seed` |" in shown
    assert "at commit `abc1234` on 2026-12-07" in shown


def test_supported_without_a_run_is_refused() -> None:
    broken = copy.deepcopy(_record())
    broken["rows"][1]["supported"] = "yes"
    with pytest.raises(LatestRecordError, match="supported without a run"):
        parse(broken)
    with pytest.raises(LatestRecordError, match="not a kvpool-latest-record/1"):
        parse({"schema": "other"})


def test_the_kept_record_renders() -> None:
    record = load(DOCS)
    assert record.command == "kvpool targets --latest --json"
    assert any(row.engine == "vllm" for row in record.rows)
    assert latest_table(record).count("\n|") >= len(record.rows)
