"""``kvpool validate`` on our own engine's runs: a clean stream passes; the planted
per-copy fault is caught on seeds 1-3 with a shrunk trace (by re-running the engine, a
process per attempt, on seed 1); each other kind of difference is caught when planted in
the files; malformed files are exit 2 naming what is wrong."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.tools.validate import impl_engine
from kvpool.conformance.tools.validate.request_log import read_log


def engine_run(folder: Path, seed: int, fault: str | None = None, requests: int = 24) -> list[str]:
    """Our engine's log and recording for ``seed`` (in ``folder``), as validate's arguments."""
    log, recording = folder / f"log-{seed}.jsonl", folder / f"recording-{seed}.jsonl"
    args = ["--seed", str(seed), "--requests", str(requests), str(log), str(recording)]
    assert impl_engine.main(args + (["--fault", fault] if fault else [])) == 0
    return [str(log), str(recording)]


def validate(*args: str) -> Result:
    return CliRunner().invoke(main, ["validate", *args, "--profile", "seed"])


def test_our_engines_stream_is_the_specs(tmp_path: Path) -> None:
    result = validate(*engine_run(tmp_path, 1))
    assert result.exit_code == 0, result.output
    assert "24 requests judged after every request" in result.output
    assert "no difference" in result.output


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_planted_per_copy_fault_is_caught_with_a_shrunk_trace(
    tmp_path: Path, seed: int
) -> None:
    trace = tmp_path / "trace.jsonl"
    result = validate(*engine_run(tmp_path, seed, "per-copy"), "--trace", str(trace))
    assert result.exit_code == 1, result.output
    assert "difference: per-copy: after request" in result.output
    assert "2 stores in the spec's stream, 1 in the engine's" in result.output
    shrunk = read_log(trace)
    assert 1 <= len(shrunk.requests) < 24
    header = json.loads(trace.read_text(encoding="utf-8").splitlines()[0])
    assert header["difference"].startswith("per-copy: ")


def test_shrinking_re_runs_the_engine(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    driver = f"{sys.executable} -m kvpool.conformance.tools.validate.impl_engine --fault per-copy"
    args = [*engine_run(tmp_path, 2, "per-copy"), "--trace", str(trace), "--rerun", driver]
    result = validate(*args, "--json")
    assert result.exit_code == 1, result.output
    record = json.loads(result.output)
    assert record["rerun"] is True and record["attempts"] >= 2
    assert record["shrunk_difference"].startswith("per-copy: ")
    assert len(record["shrunk"]) <= record["requests"]
    assert len(read_log(trace).requests) == len(record["shrunk"])


def test_a_driver_that_fails_leaves_the_log_cut_after_the_difference(tmp_path: Path) -> None:
    args = [*engine_run(tmp_path, 1, "per-copy"), "--rerun", f"{sys.executable} -c 'exit(3)'"]
    result = validate(*args, "--trace", str(tmp_path / "t.jsonl"))
    assert result.exit_code == 1, result.output
    assert "cutting the log after the difference (re-running the engine: the driver failed)" in (
        " ".join(result.output.split())
    )


def _lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def _write(path: str, lines: list[str]) -> None:
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _edit_events(recording: str, kind: str, edit: Callable[[list[Any]], list[Any]]) -> None:
    """Rewrite the events of the first message of the recording holding a ``kind`` event."""
    lines = _lines(recording)
    for number, line in enumerate(lines[1:], start=1):
        recorded = json.loads(line)
        ts, events, rank = msgspec.msgpack.decode(base64.b64decode(recorded["frames"][2]))
        if any(e["type"] == kind for e in events):
            payload = msgspec.msgpack.encode([ts, edit(events), rank])
            recorded["frames"][2] = base64.b64encode(payload).decode()
            lines[number] = json.dumps(recorded)
            _write(recording, lines)
            return
    raise AssertionError(f"no {kind} in the run")


def test_a_parent_never_stored_is_a_stream_difference(tmp_path: Path) -> None:
    log, recording = engine_run(tmp_path, 1)

    def orphan(events: list[Any]) -> list[Any]:
        for event in events:
            if event["type"] == "BlockStored" and event["parent_block_hash"] is not None:
                event["parent_block_hash"] = b"\x01" * 32
                break
        return events

    _edit_events(recording, "BlockStored", orphan)
    result = validate(log, recording)
    assert result.exit_code == 1, result.output
    assert "difference: stream: after request" in result.output
    assert "a hash never stored" in " ".join(result.output.split())


def test_a_block_the_engine_never_computed_is_a_presence_difference(tmp_path: Path) -> None:
    log, recording = engine_run(tmp_path, 1)
    extra = {"type": "BlockStored", "block_hashes": [b"\x02" * 32], "parent_block_hash": None}
    extra.update(token_ids=[600, 601, 602, 603], block_size=4, lora_id=None, medium="GPU")
    extra.update(lora_name=None, group_idx=0)
    _edit_events(recording, "BlockStored", lambda events: [*events, extra])
    result = validate(log, recording)
    assert result.exit_code == 1, result.output
    assert "difference: presence: after request 1" in result.output
    assert "ending [..., 600, 601, 602, 603] held by the engine only" in (
        " ".join(result.output.split())
    )


def test_a_wrong_hit_is_a_hits_difference(tmp_path: Path) -> None:
    log, recording = engine_run(tmp_path, 1)
    lines = _lines(log)
    request = json.loads(lines[2])
    request["cached_tokens"] += 1
    lines[2] = json.dumps(request)
    _write(log, lines)
    result = validate(log, recording)
    assert result.exit_code == 1, result.output
    assert "difference: hits: after request 2" in result.output


@pytest.mark.parametrize(
    ("which", "line", "says"),
    [
        ("log", "not json", "line 3 is not JSON"),
        ("log", '{"request_id": "r9", "prompt": []}', "'prompt' must be a non-empty list"),
        ("log", '{"request_id": "r9", "prompt": [1], "colour": 1}', "unknown field(s) ['colour']"),
        ("recording", '{"t": 1, "frames": ["%%%"]}', "a frame is not base64"),
        ("recording", None, "not a saved KV-event stream"),
        ("log", '{"request_id": "r9", "prompt": [' + ",".join(["1"] * 4000) + "]}", "no room"),
    ],
)
def test_malformed_files_are_exit_2_naming_the_problem(
    tmp_path: Path, which: str, line: str | None, says: str
) -> None:
    log, recording = engine_run(tmp_path, 1, requests=2)
    path = log if which == "log" else recording
    if line is None:  # the log given as the recording
        recording = log
    else:
        _write(path, [*_lines(path)[:2], line])
    result = validate(log, recording)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert says in " ".join(result.output.split()), result.output
