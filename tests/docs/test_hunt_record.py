"""The levels page's table of steps per second: computed from the recorded result tables,
never typed in."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from kvpool.conformance.tools.reference.fragments import DOCS, expand
from kvpool.conformance.tools.reference.hunt_record import (
    DATA,
    HuntRecordError,
    load,
    parse,
    rates_table,
)

DASH = "\N{EN DASH}"


def _run(seed: int, safety: int, requests: int, result: str = "pass") -> dict[str, Any]:
    return {
        "seed": seed,
        "rows": [
            {"run": "pool/safety", "result": result, "steps": 6000, "steps_per_second": safety},
            {"run": "requests/pool", "result": "pass", "steps": 6000, "steps_per_second": requests},
        ],
        "cpu_seconds": 5.0 + seed / 10,
        "wall_seconds": 5.5 + seed / 10,
        "load_before": 0.25 * seed,
    }


def _record() -> dict[str, Any]:
    return {
        "schema": "kvpool-hunt-record/1",
        "commit": "abc1234",
        "date": "2026-12-02",
        "machine": "2 cores, x86_64, Python 3.11.7",
        "targets": [
            {
                "target": "impl",
                "command": "kvpool conform --seed N",
                "runs": [_run(1, 9000, 5000), _run(2, 11000, 4000), _run(3, 10000, 6000)],
            },
            {
                "target": "vllm==0.33.0",
                "command": "kvpool conform --target vllm==0.33.0 --seed N",
                "runs": [_run(1, 12000, 4500, "FAIL (7)")],
            },
        ],
    }


def test_the_table_is_computed_from_the_runs() -> None:
    shown = rates_table(parse(_record()))
    # impl over three seeds: lowest, highest, median; one seed of vLLM: that figure
    assert f"| `pool/safety` | 9,000{DASH}11,000 (median 10,000) | 12,000 |" in shown
    assert f"| `requests/pool` | 4,000{DASH}6,000 (median 5,000) | 4,500 |" in shown
    assert f"for N = 1, 2, 3: 5.10{DASH}5.30 s of CPU, 5.60{DASH}5.80 s of wall-clock" in shown
    assert f"load before each run 0.2{DASH}0.8" in shown
    assert "`pool/safety` end with the target's known findings" in shown
    assert "commit `abc1234` on 2026-12-02" in shown


def test_a_run_only_one_target_has_is_not_run_for_the_other() -> None:
    data = _record()
    for run in data["targets"][0]["runs"]:
        run["rows"].append(
            {"run": "requests/manager", "result": "pass", "steps": 10, "steps_per_second": 7}
        )
    assert "| `requests/manager` | 7 | not run |" in rates_table(parse(data))


def _broken(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(_record())
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema="other"), "not a kvpool-hunt-record/1 record"),
        (lambda d: d.update(targets=[]), "record: no targets"),
        (lambda d: d["targets"][0].update(runs=[]), "target 0: no runs"),
        (lambda d: d["targets"][0]["runs"][1].update(seed=1), "target 0: a seed is run twice"),
        (lambda d: d["targets"][0]["runs"][0].update(rows=[]), "target 0, run 0: no rows"),
        (
            lambda d: d["targets"][0]["runs"][0]["rows"][0].update(steps=-1),
            "target 0, run 0, row 0: steps and steps_per_second must be >= 0",
        ),
        (
            lambda d: d["targets"][0]["runs"][0]["rows"][0].update(steps_per_second="fast"),
            "target 0, run 0, row 0: 'steps_per_second' must be a int, not 'fast'",
        ),
        (
            lambda d: d["targets"][0]["runs"][0].update(cpu_seconds=float("nan")),
            "target 0, run 0: 'cpu_seconds' must be >= 0, not nan",
        ),
        (
            lambda d: d["targets"][0]["runs"][0]["rows"].pop(),
            "target 0: the seeds' result tables have different runs",
        ),
        (
            lambda d: d["targets"][0]["runs"][0]["rows"].append(
                d["targets"][0]["runs"][0]["rows"][0]
            ),
            "target 0, run 0: a run is listed twice",
        ),
        (lambda d: d.update(commit=None), "record: 'commit' must be a str"),
    ],
)
def test_a_malformed_record_is_refused_saying_where(change: Any, message: str) -> None:
    with pytest.raises(HuntRecordError, match="^" + re.escape(message)):
        parse(_broken(change))


def test_the_docs_record_renders_on_the_levels_page() -> None:
    record = load(DOCS)
    assert json.loads((DOCS / DATA).read_text())["schema"] == "kvpool-hunt-record/1"
    assert {t.target for t in record.targets} == {"impl", "vllm==0.33.0"}
    assert all(len(t.runs) >= 3 for t in record.targets)  # a spread, not one lucky seed
    page = (DOCS / "guide" / "levels.md").read_text()
    assert "<!-- kvpool:hunt-rates -->" in page
    built = expand(page, "guide/levels.md")
    assert rates_table(record) in built
