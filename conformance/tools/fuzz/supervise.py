"""The parent of a campaign: it starts the workers, shows what they report, and stops them
at the deadline, on Ctrl-C, or at the first failure, leaving no process behind.

Stopping goes in steps: the stop event (workers end after their current round); SIGINT to
each worker still running (it ends its round at once, but finishes writing a finding);
SIGTERM; SIGKILL. A deadline (or an action budget) starts with the event; Ctrl-C and the
first failure go straight to SIGINT.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live

from .campaign import work
from .messages import Crashed, Found, Message, Progress
from .plan import CampaignPlan
from .status import LiveLine, Tally, print_finding
from .tether import end_group

#: Seconds workers get to end their round after the deadline, before SIGINT.
ROUND_GRACE = 5.0
#: Seconds after SIGINT before SIGTERM (a worker may be shrinking a finding: its budget is
#: 20 s), and after SIGTERM before SIGKILL. A second Ctrl-C skips the wait.
INTERRUPT_GRACE = 30.0
TERMINATE_GRACE = 3.0

DEADLINE = "deadline reached"
ENOUGH_ACTIONS = "action budget reached"
INTERRUPTED = "interrupted (Ctrl-C)"
FIRST_FAILURE = "stopped at the first failure"
CRASHED = "a worker failed"


@dataclass
class Outcome:
    """How a campaign ended."""

    tally: Tally
    seconds: float
    reason: str
    #: kvpool's own failures in workers, and workers that died without a word.
    crashes: list[str] = field(default_factory=list)
    #: Workers that did not stop when asked and were terminated.
    terminated: list[int] = field(default_factory=list)


class Stopper:
    """The parent's SIGINT: counted, never raised, so a Ctrl-C cannot break the loop."""

    def __init__(self) -> None:
        self.interrupts = 0

    @property
    def interrupted(self) -> bool:
        return self.interrupts > 0

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.interrupts += 1


def supervise(
    plan: CampaignPlan,
    workers: int,
    duration: float | None,
    console: Console,
    *,
    stop_on_failure: bool = False,
    max_actions: int | None = None,
    status_every: float = 60.0,
) -> Outcome:
    """Run the campaign of ``plan`` on ``workers`` processes for ``duration`` seconds, or
    until they ran ``max_actions`` lockstep actions (``None``, ``None``: until Ctrl-C),
    showing its progress on ``console``."""
    context = multiprocessing.get_context("spawn")
    outbox: Queue[Message] = context.Queue()
    stop = context.Event()
    stopper = Stopper()
    tally = Tally(plan, workers)
    start = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - start

    processes: list[SpawnProcess] = []
    with _sigint(stopper, processes, plan, outbox, stop, workers, context):
        tally.running = len(processes)
        console.print(
            f"{workers} worker{'s' if workers > 1 else ''} started (Ctrl-C stops the campaign)",
            highlight=False,
        )
        live: Any = (
            Live(LiveLine(tally, elapsed), console=console, refresh_per_second=4, transient=True)
            if console.is_terminal
            else nullcontext()
        )
        with live:
            reason, crashes, terminated = _watch(
                processes,
                outbox,
                stop,
                stopper,
                tally,
                console,
                deadline=start + duration if duration else math.inf,
                elapsed=elapsed,
                stop_on_failure=stop_on_failure,
                max_actions=max_actions,
                status_every=None if console.is_terminal else status_every,
            )
    return Outcome(tally, elapsed(), reason, crashes, terminated)


@contextmanager
def _sigint(
    stopper: Stopper,
    processes: list[SpawnProcess],
    plan: CampaignPlan,
    outbox: Queue[Message],
    stop: Any,
    workers: int,
    context: Any,
) -> Iterator[None]:
    """Start the workers with SIGINT ignored (a Ctrl-C while they import would end them
    with a traceback; they install their own handler once they run), then note SIGINT in
    ``stopper`` until the campaign is over; make sure no worker outlives it."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    try:
        if main:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        for worker in range(1, workers + 1):
            process = context.Process(
                target=work,
                args=(plan, worker, outbox, stop, os.getpid()),
                name=f"kvpool-fuzz-worker-{worker}",
                daemon=True,
            )
            process.start()
            processes.append(process)
        if main:
            signal.signal(signal.SIGINT, stopper.handle)
        yield
    finally:
        stop.set()
        _end(processes, outbox)
        outbox.close()
        outbox.cancel_join_thread()
        if main:
            signal.signal(signal.SIGINT, previous)


def _watch(
    processes: list[SpawnProcess],
    outbox: Queue[Message],
    stop: Any,
    stopper: Stopper,
    tally: Tally,
    console: Console,
    *,
    deadline: float,
    elapsed: Callable[[], float],
    stop_on_failure: bool,
    max_actions: int | None,
    status_every: float | None,
) -> tuple[str, list[str], list[int]]:
    """Read the workers' messages until every worker is gone (or ignored SIGINT for
    :data:`INTERRUPT_GRACE` seconds); why the campaign stopped, what went wrong in workers,
    and the workers still running (to be terminated)."""
    reason: str | None = None
    crashes: list[str] = []
    ended: set[int] = set()
    interrupt_at = give_up_at = math.inf
    signalled = False
    next_status = time.monotonic() + status_every if status_every else math.inf

    def read(wait: float) -> None:
        for message in _drain(outbox, wait):
            if isinstance(message, Progress):
                tally.update(message)
            elif isinstance(message, Found):
                finding = tally.add(message, elapsed())
                if finding is not None:
                    print_finding(console, finding, message)
            else:
                ended.add(message.worker)
                if isinstance(message, Crashed):
                    crashes.append(f"worker {message.worker}: {message.error}")

    while True:
        read(wait=0.2)
        alive = [p for p in processes if p.is_alive()]
        tally.running = len(alive)
        now = time.monotonic()
        if reason is None:
            reason = _stop_reason(now, deadline, stopper, tally, stop_on_failure, crashes)
            if reason is None and max_actions is not None and tally.actions >= max_actions:
                reason = ENOUGH_ACTIONS
            if reason is None and not alive:
                reason = CRASHED
            if reason is not None:
                stop.set()
                patient = reason in (DEADLINE, ENOUGH_ACTIONS)
                interrupt_at = now + ROUND_GRACE if patient else now
                if reason == INTERRUPTED:
                    console.print(
                        "stopping the workers (Ctrl-C again to end them at once)",
                        highlight=False,
                    )
        elif stopper.interrupted:
            interrupt_at = min(interrupt_at, now)  # a Ctrl-C while waiting for the round
        if not signalled and now >= interrupt_at:
            _interrupt(alive)
            signalled, give_up_at = True, now + INTERRUPT_GRACE
        if stopper.interrupts > 1:
            give_up_at = min(give_up_at, now)
        if now >= next_status:
            console.print(tally.line(elapsed()), markup=False, highlight=False, soft_wrap=True)
            next_status = now + (status_every or math.inf)
        if reason is not None and (not alive or now >= give_up_at):
            read(wait=0.0)
            break
    running = []
    for number, process in enumerate(processes, 1):
        if process.exitcode is None:
            running.append(number)
        elif number not in ended:
            crashes.append(f"worker {number} died (exit code {process.exitcode})")
    return reason, crashes, running


def _stop_reason(
    now: float,
    deadline: float,
    stopper: Stopper,
    tally: Tally,
    stop_on_failure: bool,
    crashes: list[str],
) -> str | None:
    if stopper.interrupted:
        return INTERRUPTED
    if crashes:
        return CRASHED
    if stop_on_failure and tally.findings:
        return FIRST_FAILURE
    if now >= deadline:
        return DEADLINE
    return None


def _drain(outbox: Queue[Message], wait: float) -> Iterator[Message]:
    """The messages waiting (waiting up to ``wait`` seconds for the first one)."""
    try:
        yield outbox.get(timeout=wait) if wait else outbox.get_nowait()
        while True:
            yield outbox.get_nowait()
    except queue.Empty:
        return


def _interrupt(processes: list[SpawnProcess]) -> None:
    for process in processes:
        if process.pid is not None and process.is_alive():
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGINT)


def _end(processes: list[SpawnProcess], outbox: Queue[Message]) -> None:
    """Make sure every worker is gone: SIGTERM, then SIGKILL, each to the worker's own
    process group (what the pool under test started goes too), reading the queue meanwhile
    (a worker cannot exit while its last messages are unread)."""
    for ending in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in processes if p.is_alive()]
        if not alive:
            break
        for process in alive:
            if process.pid is not None:
                end_group(process.pid, ending)
        until = time.monotonic() + TERMINATE_GRACE
        while time.monotonic() < until and any(p.is_alive() for p in alive):
            for _ in _drain(outbox, wait=0.1):
                pass
    for process in processes:
        process.join(timeout=1.0)
