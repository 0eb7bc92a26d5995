"""A short ``kvpool conform`` of one release: whether the suite runs it, and what it finds.

``kvpool targets --latest`` and the canary test judge an engine's newest release by running
it, not by its number: every level the engine supports, with small sizes, in a process of
its own (``python -c 'from kvpool.conformance.cli import main; main()' conform ...``, so a
release's loading never touches this process). Exit status 0 is a pass, 1 findings (their
kinds read off the traces written), 2 a refusal, whose message is the reason. A target
whose pool or manager publishes no KV events has no events run: that is said, not refused.
An engine with a driver whose request machine refuses the release (SGLang from 0.5 on,
TokenSpeed: no manager to drive without restating their schedulers) runs at the engine
machine instead, which judges its events too; that is said as well.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: The sizes of a short run: a few test cases of a few steps, one seed.
SHORT = ("--max-examples", "8", "--steps", "15", "--seed", "1", "--max-findings", "12")
#: How long one run may take, in seconds (the first one downloads the release).
RUN_SECONDS = 900
#: What ``conform`` says of a target or manager without KV events.
NO_EVENTS = "publishes no KV events"
#: The run of an engine whose request machine refuses it: its own scheduler's.
ENGINE = ["--machine", "engine"]
#: What the row says of such an engine.
ENGINE_ONLY = "the requests machine refused it: run at --machine engine"


@dataclass(frozen=True)
class ShortRun:
    """What a short conform of one release gave."""

    #: ``pass``, ``findings`` or ``refused``.
    status: str
    #: The kinds of finding (rules and properties), when there are findings.
    rules: tuple[str, ...] = ()
    #: Why it was refused, or what did not run (``no events``).
    reason: str = ""
    #: The commands run (to reproduce).
    commands: tuple[str, ...] = ()

    @property
    def ran(self) -> bool:
        return self.status != "refused"


def plan(target: str, has_pool: bool, manager: str | None) -> list[list[str]]:
    """The conform options of each run: the pool levels and the request machine (with the
    engine's own manager), then the events level."""
    if has_pool:
        machines = ["--machine", "pool,requests"]
        if manager:
            machines += ["--manager", manager]
        return [
            [*machines, "--level", "safety,order,robustness"],
            ["--machine", "pool", "--level", "events"],
        ]
    return [["--machine", "requests"], ["--machine", "requests", "--level", "events"]]


def short_run(
    target: str,
    has_pool: bool,
    manager: str | None = None,
    progress: Callable[[str], None] | None = None,
    runner: Callable[[list[str]], tuple[int, str]] | None = None,
    drives: bool = False,
) -> ShortRun:
    """Run ``target`` shortly at every level; ``progress`` is told what runs. ``drives``:
    the engine has a driver, run at the engine machine when its request machine refuses
    a target with no pool."""
    say = progress or (lambda text: None)
    run = runner or _conform
    rules: set[str] = set()
    commands: list[str] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kvpool-latest-") as traces:

        def conform(options: list[str]) -> tuple[int, str]:
            argv = ["conform", "--target", target, *options, *SHORT, "--no-coverage"]
            commands.append("kvpool " + " ".join(argv))
            say(f"{target}: {' '.join(options)} (a short run)")
            return run([*argv, "--trace-dir", traces])

        for options in plan(target, has_pool, manager):
            status, output = conform(options)
            if (
                status == 2
                and "--level" in options
                and "events" in options
                and (NO_EVENTS in " ".join(output.split()))
            ):
                notes.append("no events")
                continue
            if status == 2 and drives and not has_pool and not commands[1:]:
                status, output = conform(ENGINE)
                if status in (0, 1):
                    notes.append(ENGINE_ONLY)
                    break
            if status not in (0, 1):
                return ShortRun("refused", (), _reason(output, status), tuple(commands))
        rules |= _kinds(Path(traces))
    verdict = "findings" if rules else "pass"
    return ShortRun(verdict, tuple(sorted(rules)), "; ".join(notes), tuple(commands))


def _conform(argv: list[str]) -> tuple[int, str]:
    """``kvpool ARGV`` in a process of its own: its status and output."""
    command = [sys.executable, "-c", "from kvpool.conformance.cli import main; main()", *argv]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=RUN_SECONDS
        )
    except subprocess.TimeoutExpired:
        return 2, f"the short run took more than {RUN_SECONDS} s"
    return done.returncode, done.stdout + done.stderr


def _reason(output: str, status: int) -> str:
    """The error a refused run printed (its ``error:`` paragraph), on one line."""
    flat = " ".join(output.split())
    found = re.search(r"error: (.*)", flat)
    if found:
        return found.group(1)[:600]
    tail = flat[-600:] if flat else "(no output)"
    return f"exit {status}: {tail}"


def _kinds(folder: Path) -> set[str]:
    """The kinds of finding of the traces in ``folder`` (a rule or property each), the
    engine machine's among them."""
    from ...machines.engine.trace_file import SUFFIX, read_engine_trace
    from ...machines.pool.signature import signature
    from ...trace.files import read_trace

    kinds = set()
    for path in sorted(folder.glob("*.itf.json")):
        if path.name.endswith(SUFFIX):
            message = read_engine_trace(path).message
        else:
            message = read_trace(path).meta.message
        kinds.add(_rule(message) or signature(message))
    return kinds


def _rule(message: str) -> str | None:
    """The rule, property or invariant a finding's message names (``touch-identity``)."""
    found = re.search(r"(?:rule|property|invariant) '([a-z0-9-]+)'", message)
    return found.group(1) if found else None
