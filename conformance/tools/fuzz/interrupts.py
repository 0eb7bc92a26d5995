"""How a worker takes Ctrl-C (SIGINT).

A Ctrl-C in a terminal reaches the parent (each worker leads a process group of its own,
see :mod:`.tether`), which sends SIGINT to each worker when the campaign stops. The
handler only notes it: a ``KeyboardInterrupt`` raised at an arbitrary point could land in
a garbage-collector callback (and be lost) or in the middle of writing a trace. The worker
raises it itself as the next test case starts (:meth:`Interrupts.check`), where
Hypothesis lets it through without storing the interrupted test case, and checks between
rounds; a finding being shrunk and written is finished first.
"""

from __future__ import annotations

import signal
from types import FrameType


class Interrupts:
    """SIGINT in a worker, noted by the handler and acted on at the next test case."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def check(self) -> None:
        """Stop the round now (``KeyboardInterrupt``) if SIGINT arrived."""
        if self.requested:
            raise KeyboardInterrupt
