"""Saved streams (conformance/tools/stream/recording.py) are total: any file reads as messages
or stops at one RecordingError naming its line; `kvpool monitor FILE` exits only with
its documented statuses (0 no violation, 1 violations, 2 a file it cannot read)."""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hostile import FUZZ, escapes, hostile_json, hostile_messages, json_text, mangled
from hypothesis import given
from hypothesis import strategies as st
from kvpool.conformance.cli import main
from kvpool.conformance.tools.stream import recording
from kvpool.conformance.tools.stream.recording import RecordingError, read_recording

HEADER = json.dumps({"format": "kvpool-kv-events", "version": 1, "sources": [], "started": 0})


def entry(frames: list[bytes], via: str = "live") -> str:
    return json.dumps(
        {"t": 0.5, "via": via, "frames": [base64.b64encode(f).decode() for f in frames]}
    )


lines = st.one_of(
    hostile_messages().map(entry),
    st.tuples(hostile_messages(), st.sampled_from(["snapshot", "replay", "x"])).map(
        lambda p: entry(*p)
    ),
    hostile_json.map(json_text),
    st.fixed_dictionaries({"t": hostile_json, "via": hostile_json, "frames": hostile_json}).map(
        json_text
    ),
    st.just("[" * 100_000),
)


@st.composite
def files(draw: st.DrawFn) -> bytes:
    body = "\n".join([HEADER, *draw(st.lists(lines, max_size=5))]) + "\n"
    data = body.encode("utf-8", "surrogatepass")
    return draw(st.one_of(st.just(data), mangled(data), st.binary(max_size=300)))


def _read_all(data: bytes) -> list[recording.Recorded]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "s.jsonl"
        path.write_bytes(data)
        return list(read_recording(path))


@FUZZ
@given(files())
def test_any_file_is_messages_or_one_recording_error(data: bytes) -> None:
    assert escapes(lambda: _read_all(data), RecordingError) is None


@FUZZ
@given(files())
def test_monitor_of_any_file_exits_with_a_documented_status(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "s.jsonl"
        path.write_bytes(data)
        result = CliRunner().invoke(main, ["monitor", str(path)])
    assert result.exit_code in (0, 1, 2), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output


def test_a_line_longer_than_the_bound_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "MAX_RECORDING_LINE_BYTES", 100)
    data = (HEADER + "\n" + entry([b"", b"\0" * 8, b"\x90" * 200]) + "\n").encode()
    with pytest.raises(RecordingError, match="line 2: longer than 100 bytes"):
        _read_all(data)


def _leaky_read(data: bytes) -> None:
    """A reader like the old one: text lines, only json's ValueError expected."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "s.jsonl"
        path.write_bytes(data)
        with path.open(encoding="utf-8") as lines_:
            for text in lines_:
                try:
                    json.loads(text)
                except ValueError as exc:
                    if isinstance(exc, UnicodeDecodeError):
                        raise
                    raise RecordingError(str(exc)) from None


def test_the_strategy_finds_the_crashes_a_leaky_reader_has() -> None:
    from hypothesis import HealthCheck, find, settings

    crash = find(
        files(),
        lambda d: escapes(lambda: _leaky_read(d), RecordingError) is not None,
        settings=settings(
            max_examples=5000,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        ),
    )
    assert isinstance(
        escapes(lambda: _leaky_read(crash), RecordingError), (UnicodeDecodeError, RecursionError)
    )
    assert escapes(lambda: _read_all(crash), RecordingError) is None
