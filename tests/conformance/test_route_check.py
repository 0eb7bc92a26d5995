"""kvpool route-check: short live runs of Dynamo's indexer process beside the in-process
tree on vLLM 0.33.0's, 0.24.0's and 0.10.2's own publishers (the same stream, the same
losses; clean is exact; data-parallel ranks kept apart; after a restart the indexer skips
the new publisher's batches up to the old sequence), the curve over the run, the contract
page's tables and charts from the committed recordings, and a malformed recording refused
by name."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.reference.fragments import route_check_table
from kvpool.conformance.tools.routes.chart import PANEL_H, PANEL_W, route_check_chart
from kvpool.conformance.tools.routes.isolation import INSIDE, IsolationError, run_isolated
from kvpool.conformance.tools.routes.recording import (
    contract_table,
    read_recording,
    recording_paths,
)
from kvpool.conformance.tools.routes.scenarios import Setting, run_scenario
from kvpool.conformance.tools.stream.publisher import PublisherError

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "docs" / "data" / "route-check"
NEEDS_DYNAMO = pytest.mark.skipif(
    importlib.util.find_spec("dynamo") is None,
    reason="the live check needs Dynamo's indexer: pip install -e '.[dynamo]' "
    "(ai-dynamo-runtime==1.6.1)",
)


def _namespace_or_skip() -> None:
    try:
        run_isolated(["--help"])
    except IsolationError as exc:
        pytest.skip(str(exc))


def _live(tmp_path: Path, *argv: str) -> dict[str, Any]:
    """One route-check run (in its namespace); its recording, by scenario."""
    _namespace_or_skip()
    record = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-c", "from kvpool.conformance.cli import main; main()",
         "route-check", *argv, "--record", str(record)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    document = json.loads(record.read_text())
    document["by_name"] = {s["name"]: s for s in document["scenarios"]}
    document["returncode"] = done.returncode
    document["output"] = done.stdout
    return document


def _exact(consumer: dict[str, Any]) -> bool:
    return bool(
        consumer["checks"] > 0 and consumer["held"] == consumer["found"] == consumer["claimed"]
    )


@NEEDS_DYNAMO
def test_a_short_live_run_of_the_indexer(tmp_path: Path) -> None:
    run = _live(tmp_path, "--consumer", "dynamo,dynamo-indexer", "--scenario", "clean,twins",
                "--requests", "12")  # fmt: skip
    assert run["returncode"] == 1  # the twins lose blocks
    by_name = {name: s["consumers"] for name, s in run["by_name"].items()}
    for consumer in ("dynamo", "dynamo-indexer"):
        assert _exact(by_name["clean"][consumer])
    tree, indexer = by_name["twins"]["dynamo"], by_name["twins"]["dynamo-indexer"]
    assert indexer["found"] < indexer["held"], indexer  # a duplicate copy's prefix lost
    assert (tree["held"], tree["found"]) == (indexer["held"], indexer["found"])
    # the curve: one point per check, batches rising, whole until the copy goes, then lower
    curve = indexer["over_time"]
    assert len(curve) == indexer["checks"]
    assert [p[0] for p in curve] == sorted({p[0] for p in curve})
    assert curve[0][1] == 1.0 and min(p[1] for p in curve) < 1.0
    assert "over the run" in run["output"]


@NEEDS_DYNAMO
def test_vllm_0_24_publisher_runs_in_the_namespace_with_ranks_and_a_restart(
    tmp_path: Path,
) -> None:
    """0.24.0's publisher binds tcp://* only: it runs in the loopback-only namespace. Two
    data-parallel ranks are kept apart by every consumer; after a restart the indexer counts
    fewer stores than were published, the in-process tree (no sequence numbers) none fewer."""
    run = _live(tmp_path, "--consumer", "count,dynamo,dynamo-indexer", "--target",
                "vllm==0.24.0", "--scenario", "data-parallel,restart",
                "--requests", "12")  # fmt: skip
    assert run["publisher"] == "0.24.0"
    dp = run["by_name"]["data-parallel"]["consumers"]
    for name in ("count", "dynamo", "dynamo-indexer"):
        ranks = dp[name]["ranks"]
        assert len(ranks) == 2 and all(_exact(r) and r["held"] > 0 for r in ranks), name
        assert sum(r["held"] for r in ranks) == dp[name]["held"]
    restart = run["by_name"]["restart"]
    stored = restart["published"]["BlockStored"]
    counted = sum(n for k, n in restart["indexer"].items() if k.startswith("stored/"))
    assert counted < stored, restart
    # Dynamo's listener skips every batch whose sequence is at or below the last it applied:
    # of the new publisher's events it counts exactly those sent past the old sequence
    after = restart["restart"]
    assert (
        after["new_events_counted"] == after["new_events_past_old_sequence"] < after["new_events"]
    )
    indexer, tree = restart["consumers"]["dynamo-indexer"], restart["consumers"]["dynamo"]
    assert tree["found"] == tree["held"] and indexer["found"] < indexer["held"]


@NEEDS_DYNAMO
def test_vllm_0_10_publisher_feeds_the_indexer(tmp_path: Path) -> None:
    run = _live(tmp_path, "--consumer", "set,dynamo-indexer", "--target", "vllm==0.10.2",
                "--scenario", "clean,twins", "--requests", "10")  # fmt: skip
    assert run["publisher"] == "0.10.2"
    assert _exact(run["by_name"]["clean"]["consumers"]["dynamo-indexer"])
    twins = run["by_name"]["twins"]["consumers"]
    assert twins["dynamo-indexer"]["found"] == twins["set"]["found"] < twins["set"]["held"]


@NEEDS_DYNAMO
def test_sglang_publisher_feeds_the_indexer_batches_it_cannot_decode(tmp_path: Path) -> None:
    """SGLang 0.4.6.post5's own publisher sends [ts, events] batches; Dynamo's indexer
    (1.6.1) expects [ts, events, rank] and decodes none: its log counts every batch, its
    /metrics none, and it knows none of the blocks SGLang's tree holds."""
    run = _live(tmp_path, "--consumer", "dynamo-indexer", "--target", "sglang==0.4.6.post5",
                "--scenario", "clean", "--requests", "6")  # fmt: skip
    clean = run["by_name"]["clean"]
    indexer = clean["consumers"]["dynamo-indexer"]
    assert indexer["held"] > 0 and indexer["found"] == 0, indexer
    assert clean["indexer"]["batch/undecodable"] > 0
    assert not any("/ok" in k for k in clean["indexer"]), clean["indexer"]


def test_sglang_stream_asks_only_the_indexer() -> None:
    result = CliRunner().invoke(
        main, ["route-check", "--consumer", "count", "--target", "sglang==0.4.6.post5",
               "--scenario", "clean", "--requests", "4"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "only dynamo-indexer is asked" in result.output


def test_the_contract_table_is_rendered_from_the_committed_recordings() -> None:
    recordings = recording_paths(RECORDINGS)
    assert recordings, "no committed route-check recording"
    table = contract_table([read_recording(p) for p in recordings])
    assert table == route_check_table(RECORDINGS)
    assert "| vllm==0.33.0 | twins | 0% lost · 0% extra | 42% lost · 0% extra |" in table
    streams = {r.stream for r in map(read_recording, recordings)}
    assert {"vllm==0.33.0", "vllm==0.24.0", "vllm==0.10.2", "sglang==0.4.6.post5"} <= streams
    assert "| vllm==0.24.0 | data-parallel |" in table
    page = (ROOT / "docs" / "guide" / "kv-events-contract.md").read_text()
    for recording in map(read_recording, recordings):  # the restart rule, on every stream
        counts = recording.restart
        if recording.stream.startswith("vllm"):  # SGLang's batches are never decoded
            assert counts["new_events_counted"] == counts["new_events_past_old_sequence"]
    for marker in ("table", "over-time", "ranks", "chart", "restart", "indexer"):
        assert f"<!-- kvpool:route-check-{marker} -->" in page, marker


def test_the_charts_draw_every_recorded_point() -> None:
    """Each polyline's points are the recording's checks: x from the batch, y from the
    share (a chart drawn from anything else would not match)."""
    recording = read_recording(RECORDINGS / "vllm-0.33.0.json")
    svg = route_check_chart(recording)
    lines = re.findall(r'<polyline points="([^"]+)"[^>]*><title>([^<]+)</title>', svg)
    scenarios = [s for s in recording.curves]
    consumers = len(recording.curves["twins"])
    assert len(lines) == 2 * consumers * len(scenarios)
    twins_at = scenarios.index("twins")
    block = lines[twins_at * 2 * consumers : (twins_at + 1) * 2 * consumers]
    by_title = {title: points for points, title in block}
    drawn = [tuple(map(float, xy.split(","))) for xy in by_title["Dynamo indexer: recall"].split()]
    points = recording.curves["twins"]["dynamo-indexer"].points
    assert len(drawn) == len(points) > 2
    # x rises with the batch and y falls with the recall, both in proportion (0.1 px rounding)
    (x0, y0), p0 = drawn[0], points[0]
    for (x, y), p in zip(drawn, points, strict=True):
        assert abs((y - y0) + PANEL_H * (p.recall - p0.recall)) < 0.2, (y, p)
        assert abs((x - x0) - PANEL_W * (p.batch - p0.batch) / points[-1].batch) < 0.2, (x, p)
    assert min(p.recall for p in points) < 1.0  # the curve has something to show


def test_a_malformed_recording_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    good = json.loads((RECORDINGS / "vllm-0.33.0.json").read_text())
    good["scenarios"][0]["consumers"]["count"]["over_time"][2] = [3, 1.5, 1.0]
    bad.write_text(json.dumps(good))
    result = CliRunner().invoke(main, ["route-check", "--table", str(bad)])
    assert result.exit_code == 2
    assert "count, over_time[2]: 1.5 is not a share between 0 and 1" in result.output
    good["scenarios"][0]["consumers"]["count"]["over_time"][2] = 0.5  # version 1's form
    bad.write_text(json.dumps(good))
    result = CliRunner().invoke(main, ["route-check", "--table", str(bad)])
    assert result.exit_code == 2 and "not [batch, recall, precision]" in result.output
    bad.write_text(json.dumps({"kvpool_route_check": 2, "scenarios": [{"name": "clean"}]}))
    result = CliRunner().invoke(main, ["route-check", "--table", str(bad)])
    assert result.exit_code == 2
    assert "scenario 0: no field 'published'" in result.output
    bad.write_text("{not json")
    result = CliRunner().invoke(main, ["route-check", "--table", str(bad)])
    assert result.exit_code == 2 and "not a readable JSON recording" in result.output


def test_an_unknown_consumer_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["route-check", "--consumer", "bag"])
    assert result.exit_code == 2 and "unknown consumer 'bag'" in result.output


def test_a_wildcard_only_publisher_is_refused_outside_the_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0.24.0's publisher binds tcp://* only: outside the loopback-only namespace the
    scenario refuses it rather than bind every interface."""
    monkeypatch.delenv(INSIDE, raising=False)
    setting = Setting("vllm==0.24.0", "0.24.0", ("count",), requests=4)
    with pytest.raises(PublisherError, match="binds every interface: it runs only inside"):
        run_scenario("clean", setting)
