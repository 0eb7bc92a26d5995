"""The saved-stream format: JSON lines, one received message per line.

The first line is a header::

    {"format": "kvpool-kv-events", "version": 1, "sources": ["tcp://127.0.0.1:5557"],
     "started": 1764561600.25}

and every further line one message exactly as it came off the socket::

    {"t": 0.0132, "via": "live", "frames": ["", "AAAAAAAAAAA=", "k8tB2..."]}

``t`` is seconds since the header's ``started``; ``via`` is ``live``, ``replay`` (fetched
from the replay socket to fill a gap) or ``snapshot``; ``frames`` are the message's frames
in base64 (topic, sequence, payload for live and replayed messages, malformed ones as they
were). Reading a file back feeds the same frames through the same decoder: a file is data,
its frames are decoded and checked, nothing in it is run. A line that is not UTF-8, not
JSON, nested too deep or longer than :data:`~kvpool.conformance.bounds.MAX_RECORDING_LINE_BYTES`
is a :class:`RecordingError` naming the line; a frame that does not decode is counted and
reported by the monitor like a malformed live one.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kvpool.spec.files import UnreadableFile, open_regular_file

from ...bounds import MAX_RECORDING_LINE_BYTES, BoundsError, load_json

FORMAT = "kvpool-kv-events"
VERSION = 1


class RecordingError(ValueError):
    """A file that is not a saved stream; the message names the line."""


@dataclass(frozen=True)
class Recorded:
    t: float
    via: str
    frames: list[bytes]


class Recorder:
    """Writes a saved stream as messages arrive (flushed per line, so a killed monitor
    leaves a readable file)."""

    def __init__(self, path: Path, sources: list[str]) -> None:
        self.started = time.time()
        self.file: IO[str] = path.open("w", encoding="utf-8")
        header = {"format": FORMAT, "version": VERSION, "sources": sources}
        self._write({**header, "started": self.started})

    def record(self, frames: list[bytes], via: str) -> None:
        encoded = [base64.b64encode(f).decode("ascii") for f in frames]
        self._write({"t": round(time.time() - self.started, 6), "via": via, "frames": encoded})

    def _write(self, line: dict[str, object]) -> None:
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def read_recording(path: Path) -> Iterator[Recorded]:
    """The messages of a saved stream, in order; :class:`RecordingError` on a bad line."""
    try:
        lines = open_regular_file(path, "recording")
    except UnreadableFile as exc:
        raise RecordingError(str(exc)) from None
    with lines:
        header = _line(_read_line(lines, path, 1), path, 1)
        if header.get("format") != FORMAT or header.get("version") != VERSION:
            raise RecordingError(
                f"{path} line 1: not a saved KV-event stream (expected a header with "
                f'"format": "{FORMAT}", "version": {VERSION})'
            )
        number = 1
        while text := _read_line(lines, path, number := number + 1):
            if not text.strip():
                continue
            entry = _line(text, path, number)
            frames = entry.get("frames")
            t, via = entry.get("t", 0.0), entry.get("via", "live")
            if (
                not isinstance(frames, list)
                or not all(isinstance(f, str) for f in frames)
                or not isinstance(t, int | float)
                or isinstance(t, bool)
                or not isinstance(via, str)
            ):
                raise RecordingError(
                    f"{path} line {number}: expected {{'t': seconds, 'via': str, "
                    "'frames': [base64, ...]}"
                )
            try:
                decoded = [base64.b64decode(f, validate=True) for f in frames]
            except (ValueError, binascii.Error):
                raise RecordingError(f"{path} line {number}: a frame is not base64") from None
            yield Recorded(float(t), via, decoded)


def _read_line(lines: IO[bytes], path: Path, number: int) -> bytes:
    """The next line (``b""`` at the end), read no further than the line bound."""
    try:
        text = lines.readline(MAX_RECORDING_LINE_BYTES + 1)
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(text) > MAX_RECORDING_LINE_BYTES:
        raise RecordingError(f"{path} line {number}: longer than {MAX_RECORDING_LINE_BYTES} bytes")
    return text


def _line(text: bytes, path: Path, number: int) -> dict[str, object]:
    try:
        value = load_json(text, f"{path} line {number}", MAX_RECORDING_LINE_BYTES)
    except BoundsError as exc:
        raise RecordingError(str(exc)) from None
    if not isinstance(value, dict):
        raise RecordingError(f"{path} line {number}: not a JSON object")
    return value
