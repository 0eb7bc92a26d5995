"""The program behind an ``exec:`` target: a child process spoken to in lines of JSON.

The suite writes one line to the child's stdin and waits for one line on its stdout, at
most ``timeout`` seconds (a poll on the pipe, never a blocking read), so a program that
hangs, exits or floods is an error naming the message it was sent, never a hang. The
child's stderr goes to a temporary file whose tail those errors quote. The child is ended
by its pid: its stdin is closed (a program exits at end of input), then it is killed if it
is still there a moment later.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from ..bounds import MAX_WIRE_LINE_BYTES
from ..machines.pool.surface import SurfaceMismatch

#: Writes a message as one compact line (built once: ``json.dumps`` with options builds an
#: encoder per call).
LINE = json.JSONEncoder(separators=(",", ":"))
#: How long a program has to exit after its stdin is closed, before it is killed.
EXIT_GRACE = 0.5
#: How much of the program's stderr an error quotes.
STDERR_TAIL = 600


class WireError(SurfaceMismatch):
    """The program broke the protocol (a malformed reply, a reply to another message, no
    reply in time, an exit): a usage error (exit 2), never a finding."""


class ProgramGone(WireError):
    """The program exited, closed its input or output, or gave no reply in time: it
    answered nothing (a reply it gave that is wrong is a :class:`WireError`)."""


class BatchUnanswered(ProgramGone):
    """The program answered nothing to a ``batch`` (see :meth:`.session.Session.restart`)."""


class Child:
    """One running program: send a line, read a line, end it."""

    def __init__(self, command: tuple[str, ...], timeout: float) -> None:
        self.command = command
        self.timeout = timeout
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115  (kept open while the child runs)
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                close_fds=True,
            )
        except OSError as exc:
            self.stderr.close()
            raise WireError(f"cannot start {' '.join(command)!r}: {exc}") from None
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin = self.process.stdin
        self.stdout = self.process.stdout.fileno()
        os.set_blocking(self.stdout, False)
        self.poller = select.poll()  # one file to wait on: poll itself, no selector around it
        self.poller.register(self.stdout, select.POLLIN)
        self.buffer = b""

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(
        self,
        message: dict[str, Any],
        what: str,
        make_room: Callable[[int], None] | None = None,
    ) -> None:
        """Write ``message`` as one line (``make_room`` told its length first);
        :class:`WireError` naming ``what`` if the program is gone."""
        line = LINE.encode(message).encode() + b"\n"
        if make_room is not None:
            make_room(len(line))
        try:
            self.stdin.write(line)
            self.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise self.failure(
                f"could not send {what}: the program closed its input", ProgramGone
            ) from None

    def receive(self, what: str) -> bytes:
        """The next line the program writes (without its newline), waiting at most the
        timeout; :class:`WireError` naming ``what`` on a timeout, an exit or a line
        longer than :data:`MAX_WIRE_LINE_BYTES`."""
        deadline = time.monotonic() + self.timeout
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line, self.buffer = self.buffer[:end], self.buffer[end + 1 :]
                return line
            if len(self.buffer) > MAX_WIRE_LINE_BYTES:
                raise self.failure(
                    f"the reply to {what} is longer than {MAX_WIRE_LINE_BYTES} bytes"
                )
            left = deadline - time.monotonic()
            if left <= 0 or not self.poller.poll(max(1, int(left * 1000) + 1)):
                raise self.failure(f"no reply to {what} within {self.timeout:g} s", ProgramGone)
            try:
                chunk = os.read(self.stdout, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                raise self.failure(
                    f"the program closed its output before replying to {what}", ProgramGone
                )
            self.buffer += chunk

    def failure(self, message: str, kind: type[WireError] = WireError) -> WireError:
        """A :class:`WireError` (of ``kind``) for ``message``, the program ended, with its
        exit status and the tail of its stderr."""
        status = self.end()
        how = "" if status is None else f"; it exited with status {status}"
        tail = self.stderr_tail()
        said = f"; its stderr ends: {tail}" if tail else ""
        return kind(f"program {' '.join(self.command)!r}: {message}{how}{said}")

    def stderr_tail(self) -> str:
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - STDERR_TAIL))
            return self.stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def end(self) -> int | None:
        """Close its input, give it :data:`EXIT_GRACE` to exit, else kill it by its pid;
        its exit status if it exited by itself (``None`` if it was killed)."""
        if self.process.returncode is not None:
            return self.process.returncode
        with contextlib.suppress(OSError):
            self.stdin.close()
        try:
            return self.process.wait(EXIT_GRACE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None
        finally:
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(self.stdout)

    def close(self) -> None:
        """End the program and let go of its stderr file."""
        self.end()
        self.stderr.close()
