"""The shortest request sequence that still shows a difference.

The engine runs one request at a time, so the requests after the first difference are
dropped at once: that sequence is the trace when nothing can re-run the engine. With a
driver (``--rerun CMD ARGS...``), shrinking goes on by running the engine again, a new
process per attempt: the suite writes the candidate requests (a request log holding only
prompts and salts) and runs ``CMD ARGS... REQUESTS LOG RECORDING``; the driver runs them
on the engine and writes the engine's request log and its recorded stream there, which
are validated like the first. An attempt is kept when it shows a difference of the same
kind; chunks of requests are dropped, halves first, down to single requests, until none
can be or the budget is spent. A driver that fails (an exit status other than 0, no
files, a timeout: it is killed by its pid) makes its attempt count as not reproducing.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvpool.spec import Profile

from ..stream.recording import RecordingError
from .judge import Difference
from .request_log import LogError, LoggedRequest, RequestLog, read_log, with_requests, write_log
from .spec_side import ReplayError
from .verdict import validate


@dataclass(frozen=True)
class Shrunk:
    """The requests left, the difference they show, and how they were found."""

    log: RequestLog
    difference: Difference
    attempts: int
    #: Whether the engine was re-run (else the log was cut after the difference).
    rerun: bool
    #: Why a re-run was not used, when one was asked for and did not reproduce.
    note: str = ""


class Driver:
    """Runs the engine on candidate requests, one process per attempt."""

    def __init__(self, command: Sequence[str], profile: Profile, timeout: float) -> None:
        self.command = tuple(command)
        self.profile = profile
        self.timeout = timeout
        self.attempts = 0

    def run(
        self, template: RequestLog, requests: Sequence[LoggedRequest]
    ) -> tuple[RequestLog, Difference | None] | None:
        """The engine's log of ``requests`` and the difference its stream shows
        (``None``: the driver failed)."""
        self.attempts += 1
        asked = [LoggedRequest(r.request_id, r.prompt, r.salt) for r in requests]
        with tempfile.TemporaryDirectory(prefix="kvpool-validate-") as folder:
            paths = [
                Path(folder, name) for name in ("requests.jsonl", "log.jsonl", "recording.jsonl")
            ]
            with paths[0].open("w", encoding="utf-8") as out:
                write_log(out, with_requests(template, asked))
            try:
                done = subprocess.run(
                    [*self.command, *map(str, paths)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=self.timeout,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired):
                return None
            if done.returncode != 0:
                return None
            try:
                log = read_log(paths[1])
                verdict = validate(log, paths[2], self.profile)
            except (LogError, RecordingError, ReplayError):
                return None
        return log, verdict.difference


def shrink(
    log: RequestLog,
    difference: Difference,
    driver: Driver | None,
    budget_seconds: float,
) -> Shrunk:
    """The shortest sequence found within the budget that shows ``difference``'s kind."""
    cut = with_requests(log, log.requests[: difference.request + 1])
    if driver is None:
        return Shrunk(cut, difference, 0, False)
    deadline = time.monotonic() + budget_seconds
    tried = driver.run(log, cut.requests)
    if tried is None or tried[1] is None or tried[1].kind != difference.kind:
        why = "the driver failed" if tried is None else "the difference did not show again"
        return Shrunk(cut, difference, driver.attempts, False, f"re-running the engine: {why}")
    best_log, best = tried[0], tried[1]
    chunk = max(1, len(best_log.requests) // 2)
    while time.monotonic() < deadline:
        dropped = False
        start = 0
        while start < len(best_log.requests) and time.monotonic() < deadline:
            requests = best_log.requests[:start] + best_log.requests[start + chunk :]
            attempt = driver.run(best_log, requests) if requests else None
            if attempt is not None and attempt[1] is not None and attempt[1].kind == best.kind:
                found = attempt[1]
                best_log = with_requests(attempt[0], attempt[0].requests[: found.request + 1])
                best, dropped = found, True
            else:
                start += chunk
        if chunk == 1 and not dropped:
            break
        chunk = max(1, chunk // 2)
    return Shrunk(best_log, best, driver.attempts, True)
