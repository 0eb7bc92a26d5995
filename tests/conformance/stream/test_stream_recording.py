"""Saved streams: written as received, read back as data by `kvpool monitor FILE`."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.stream.recording import Recorder, read_recording
from wire_frames import message, removed, stored  # the folder is on sys.path

#: vLLM 0.33.0's stream, recorded live: `kvpool publish --target vllm==0.33.0 --requests 2
#: --hash-block-size 4` watched by `kvpool monitor --consumer count --save ...`. Its
#: partial-entry stores name a parent hash never published (upstream #58119).
RECORDED = Path(__file__).parent / "data" / "vllm-0.33.0-partial-parent.jsonl"


def monitor(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["monitor", *args])
    return result.exit_code, result.output


def test_recorded_vllm_stream_shows_the_unknown_parent_of_a_partial_entry() -> None:
    code, out = monitor("--consumer", "count", str(RECORDED))
    assert code == 1, out
    assert "2 violation(s) of events-parent-known" in out
    assert "BlockStored [835230e50d8f35ae] parent ce0a50d82c901707" in out
    assert "batches 11 " in out and "gaps 0 " in out


def test_a_saved_stream_reads_back_frame_for_frame(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    sent = [
        message(0, [stored([b"a"])]),
        [b"garbage"],
        message(1, [removed([b"a"]), removed([b"a"])]),
    ]
    recorder = Recorder(path, ["tcp://127.0.0.1:1"])
    for frames in sent:
        recorder.record(frames, "live")
    recorder.close()
    assert [r.frames for r in read_recording(path)] == sent
    code, out = monitor(str(path))
    assert code == 1 and "MALFORMED" in out and "1 violation(s) of events-removed-known" in out


def test_a_file_that_is_not_a_saved_stream_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something else"}\n')
    code, out = monitor(str(bad))
    assert code == 2 and "line 1: not a saved KV-event stream" in out
    good_header = RECORDED.read_text().splitlines()[0]
    bad.write_text(good_header + '\n{"t": 0, "via": "live", "frames": ["%%%"]}\n')
    code, out = monitor(str(bad))
    assert code == 2 and "line 2: a frame is not base64" in out
    code, out = monitor(str(tmp_path / "missing.jsonl"))
    assert code == 2 and "cannot be opened" in out and "missing.jsonl" in out


def test_live_and_recorded_sources_do_not_mix() -> None:
    code, out = monitor("tcp://127.0.0.1:5557", str(RECORDED))
    assert code == 2 and "not both" in out
