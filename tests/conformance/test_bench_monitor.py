"""`kvpool bench --monitor`: its recording holds the keys it says, in steady state, and is
clean (a fault planted in it stops the run); each contender is measured; the command's
JSON and the docs' record of it read back into the bench page's table."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.bench import monitor
from kvpool.conformance.tools.reference.bench_record import BenchRecordError
from kvpool.conformance.tools.reference.monitor_record import SCHEMA, monitor_table, parse
from kvpool.conformance.tools.stream.watch import StreamWatch


def test_the_recording_holds_its_keys_through_the_timed_part() -> None:
    rec = monitor.recording(1_000, 2_000, seed=3)
    watch = StreamWatch("count", lambda finding: pytest.fail(str(finding)))
    for frames in rec.setup:
        watch.feed_frames(frames)
    assert watch.keys_held() == 1_000
    for frames in rec.timed:
        watch.feed_frames(frames)
    assert watch.keys_held() == 1_000 and watch.totals.events >= 2_000


@pytest.mark.parametrize("contender", ["monitor, count", "monitor, set"])
def test_each_monitor_contender_is_measured(contender: str) -> None:
    got = monitor.measure(contender, 1_000, 2_000, seed=0)
    assert got["keys_held"] == 1_000 and got["timed_events"] >= 2_000
    assert got["events_per_second"] > 0 and got["seconds"] > 0


def test_dynamo_is_fed_the_same_recording() -> None:
    if monitor.dynamo_missing():
        pytest.skip("needs ai-dynamo-runtime (pip install -e '.[dynamo]')")
    got = monitor.measure("dynamo RadixTree", 1_000, 2_000, seed=0)
    assert got["keys_held"] == 1_000 and got["events_per_second"] > 0


def test_a_recording_that_is_not_clean_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    real = monitor.recording

    def unclean(held: int, timed_events: int, seed: int) -> monitor.Recording:
        rec = real(held, timed_events, seed)
        stray = monitor._batches([monitor._removed(12345)], len(rec.setup) + len(rec.timed))
        return replace(rec, timed=rec.timed + stray)

    monkeypatch.setattr(monitor, "recording", unclean)
    with pytest.raises(AssertionError, match="events-removed-known"):
        monitor.measure("monitor, count", 1_000, 500, seed=0)


def test_the_command_json_makes_a_record_the_docs_render() -> None:
    args = ["bench", "--monitor", "--sizes", "1000", "--ops", "500", "--repeat", "1", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    record = {
        "schema": SCHEMA,
        "command": "kvpool " + " ".join(args),
        "commit": "abc1234",
        "date": "2026-12-07",
        "machine": "test",
        "report": report,
    }
    text = monitor_table(parse(record))
    assert "`monitor, count`" in text and "`monitor, set`" in text and "1,000" in text
    report["runs"][0]["seconds"] = 0.0
    with pytest.raises(BenchRecordError, match="out of range"):
        parse(record)
