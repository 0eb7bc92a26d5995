"""kvpool route-check: one short live run of Dynamo's indexer process beside the in-process
tree (the same stream, the same losses; clean is exact), the contract page's table from
the committed recording, and a malformed recording refused by name."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.reference.fragments import route_check_table
from kvpool.conformance.routes.isolation import IsolationError, run_isolated
from kvpool.conformance.routes.recording import contract_table, read_recording

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "docs" / "data" / "route-check"
NEEDS_DYNAMO = pytest.mark.skipif(
    importlib.util.find_spec("dynamo") is None,
    reason="the live check needs Dynamo's indexer: pip install 'kvpool-spec[dynamo]' "
    "(ai-dynamo-runtime==1.6.1)",
)


def _namespace_or_skip() -> None:
    try:
        run_isolated(["--help"])
    except IsolationError as exc:
        pytest.skip(str(exc))


@NEEDS_DYNAMO
def test_a_short_live_run_of_the_indexer(tmp_path: Path) -> None:
    _namespace_or_skip()
    record = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-c", "from kvpool.conformance.cli import main; main()",
         "route-check", "--consumer", "dynamo,dynamo-indexer", "--scenario", "clean,twins",
         "--requests", "12", "--record", str(record)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # the twins lose blocks
    document = json.loads(record.read_text())
    by_name = {s["name"]: s["consumers"] for s in document["scenarios"]}
    for consumer in ("dynamo", "dynamo-indexer"):
        clean = by_name["clean"][consumer]
        assert clean["checks"] > 0 and clean["held"] == clean["found"] == clean["claimed"]
    tree, indexer = by_name["twins"]["dynamo"], by_name["twins"]["dynamo-indexer"]
    assert indexer["found"] < indexer["held"], indexer  # a duplicate copy's prefix lost
    assert (tree["held"], tree["found"]) == (indexer["held"], indexer["found"])


def test_the_contract_table_is_rendered_from_the_committed_recordings() -> None:
    recordings = sorted(RECORDINGS.glob("*.json"))
    assert recordings, "no committed route-check recording"
    table = contract_table([read_recording(p) for p in recordings])
    assert table == route_check_table(RECORDINGS)
    assert "| vllm==0.33.0 | twins | 0% lost · 0% extra | 42% lost · 0% extra |" in table
    page = (ROOT / "docs" / "guide" / "kv-events-contract.md").read_text()
    assert "<!-- kvpool:route-check-table -->" in page


def test_a_malformed_recording_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kvpool_route_check": 1, "scenarios": [{"name": "clean"}]}))
    result = CliRunner().invoke(main, ["route-check", "--table", str(bad)])
    assert result.exit_code == 2
    assert "scenario 0: no field 'consumers'" in result.output
    bad.write_text("{not json")
    result = CliRunner().invoke(main, ["route-check", "--table", str(bad)])
    assert result.exit_code == 2 and "not a readable JSON recording" in result.output


def test_an_unknown_consumer_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["route-check", "--consumer", "bag"])
    assert result.exit_code == 2 and "unknown consumer 'bag'" in result.output
