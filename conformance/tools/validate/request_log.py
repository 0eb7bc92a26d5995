"""The request log: what an engine was asked and what it did, one JSON object per line.

The first line is a header, then one line per request in the order the engine ran them::

    {"format": "kvpool-request-log", "version": 1, "engine": "mocker", "block_size": 4,
     "num_gpu_blocks": 64}
    {"request_id": "r1", "prompt": [1, 2, 3, 4, 5], "salt": null, "decoded": [9, 9],
     "cached_tokens": 0, "sent": 1764561600.25, "done": 1764561600.31}

``prompt`` is the request's token ids; ``salt`` its cache salt (a string, or ``null``);
``decoded`` the generated tokens whose KV the engine computed after the prompt (vLLM
computes every sampled token but the last); ``cached_tokens`` what the engine answered as
its prefix-cache hit (``null``: not known). ``sent`` and ``done`` are the wall-clock
seconds (Unix time, the clock the stream recording's ``started`` is on) when the request
was sent and its answer came back: the events received before the next request's ``sent``
are this request's and its predecessors'. The engine runs one request at a time. A Go,
C++ or Rust engine writes this from its own tests; a line it cannot be read is a
:class:`LogError` naming the line, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kvpool.spec.files import UnreadableFile, open_regular_file

from ...bounds import MAX_RECORDING_LINE_BYTES, BoundsError, load_json

FORMAT = "kvpool-request-log"
VERSION = 1


class LogError(ValueError):
    """A file that is not a request log; the message names the line."""


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the engine ran it."""

    request_id: str
    prompt: tuple[int, ...]
    salt: str | None = None
    decoded: tuple[int, ...] = ()
    cached_tokens: int | None = None
    sent: float | None = None
    done: float | None = None


@dataclass(frozen=True)
class RequestLog:
    """The header's settings and the requests, in order."""

    engine: str
    block_size: int
    num_gpu_blocks: int
    requests: tuple[LoggedRequest, ...]


def read_log(path: Path) -> RequestLog:
    """The log at ``path``; :class:`LogError` naming the line for anything malformed."""
    try:
        lines = open_regular_file(path, "request log")
    except UnreadableFile as exc:
        raise LogError(str(exc)) from None
    with lines:
        header = _line(lines, path, 1)
        if header is None or header.get("format") != FORMAT or header.get("version") != VERSION:
            raise LogError(
                f"{path} line 1: not a request log (expected a header with "
                f'"format": "{FORMAT}", "version": {VERSION})'
            )
        engine = header.get("engine", "engine")
        block_size = header.get("block_size")
        blocks = header.get("num_gpu_blocks")
        if (
            not isinstance(engine, str)
            or not isinstance(block_size, int)
            or not isinstance(blocks, int)
            or not _count(block_size, 1)
            or not _count(blocks, 2)
        ):
            raise LogError(
                f"{path} line 1: the header needs 'block_size' (>= 1) and 'num_gpu_blocks' "
                "(>= 2), integers, and 'engine' a string"
            )
        requests = []
        number = 1
        while (entry := _line(lines, path, number := number + 1)) is not None:
            if entry:
                requests.append(_request(entry, f"{path} line {number}"))
    seen = [r.request_id for r in requests]
    if len(set(seen)) != len(seen):
        raise LogError(f"{path}: a request id is used twice")
    return RequestLog(engine, block_size, blocks, tuple(requests))


def write_log(out: IO[str], log: RequestLog) -> None:
    """``log`` in the format :func:`read_log` reads."""
    header = {"format": FORMAT, "version": VERSION, "engine": log.engine}
    header.update(block_size=log.block_size, num_gpu_blocks=log.num_gpu_blocks)
    out.write(json.dumps(header) + "\n")
    for request in log.requests:
        out.write(json.dumps(request_json(request)) + "\n")


def request_json(request: LoggedRequest) -> dict[str, Any]:
    return {
        "request_id": request.request_id,
        "prompt": list(request.prompt),
        "salt": request.salt,
        "decoded": list(request.decoded),
        "cached_tokens": request.cached_tokens,
        "sent": request.sent,
        "done": request.done,
    }


def _count(value: object, least: int) -> bool:
    return type(value) is int and value >= least


def _tokens(value: object) -> bool:
    return isinstance(value, list) and all(type(t) is int and 0 <= t < 2**31 for t in value)


def _request(entry: dict[str, Any], where: str) -> LoggedRequest:
    known = {"request_id", "prompt", "salt", "decoded", "cached_tokens", "sent", "done"}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise LogError(f"{where}: unknown field(s) {unknown}; a request has {sorted(known)}")
    rid, prompt = entry.get("request_id"), entry.get("prompt")
    if not isinstance(rid, str) or not rid:
        raise LogError(f"{where}: 'request_id' must be a non-empty string")
    if not _tokens(prompt) or not prompt:
        raise LogError(f"{where}: 'prompt' must be a non-empty list of token ids")
    decoded = entry.get("decoded", [])
    if not _tokens(decoded):
        raise LogError(f"{where}: 'decoded' must be a list of token ids")
    salt = entry.get("salt")
    if salt is not None and not isinstance(salt, str):
        raise LogError(f"{where}: 'salt' must be a string or null")
    cached = entry.get("cached_tokens")
    if cached is not None and not _count(cached, 0):
        raise LogError(f"{where}: 'cached_tokens' must be a count or null")
    times = {}
    for key in ("sent", "done"):
        value = entry.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise LogError(f"{where}: {key!r} must be seconds (Unix time) or null")
        times[key] = None if value is None else float(value)
    return LoggedRequest(
        rid, tuple(prompt), salt, tuple(decoded), cached, times["sent"], times["done"]
    )


def _line(lines: IO[bytes], path: Path, number: int) -> dict[str, Any] | None:
    """Line ``number`` as an object (``{}`` for a blank line), ``None`` at the end."""
    try:
        text = lines.readline(MAX_RECORDING_LINE_BYTES + 1)
    except OSError as exc:
        raise LogError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not text:
        return None
    if len(text) > MAX_RECORDING_LINE_BYTES:
        raise LogError(f"{path} line {number}: longer than {MAX_RECORDING_LINE_BYTES} bytes")
    if not text.strip():
        return {}
    try:
        value = load_json(text, f"{path} line {number}", MAX_RECORDING_LINE_BYTES)
    except BoundsError as exc:
        raise LogError(str(exc)) from None
    if not isinstance(value, dict):
        raise LogError(f"{path} line {number}: not a JSON object")
    return value


def with_requests(log: RequestLog, requests: Iterable[LoggedRequest]) -> RequestLog:
    """``log`` holding ``requests`` instead of its own."""
    return RequestLog(log.engine, log.block_size, log.num_gpu_blocks, tuple(requests))
