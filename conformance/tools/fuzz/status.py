"""What the parent shows: the live line while a campaign runs, each finding as it comes,
and the final tables. :class:`Tally` adds up what the workers report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...machines.pool.coverage import SITUATIONS
from ...machines.pool.lockstep import RunRecord
from ...machines.pool.runner import Failure, LevelResult
from ...machines.requests.coverage import REQUEST_SITUATIONS
from ...report import print_failure
from .jobs import job_level
from .messages import Found, JobCounts, Progress
from .plan import CampaignPlan, JobSpec

#: Every situation each machine can report.
MACHINE_SITUATIONS = {"pool": SITUATIONS, "requests": REQUEST_SITUATIONS}


@dataclass
class Finding:
    """One kind of failure in one job, however many times workers ran into it."""

    job: JobSpec
    signature: str
    failure: Failure
    #: The worker that reported it first, and when (seconds into the campaign).
    worker: int
    seconds: float
    trace: str | None
    sightings: int = 1
    #: Sightings that came from replaying the database (found before, elsewhere).
    replays: int = 0


class Tally:
    """The campaign so far, from the workers' latest progress and their findings."""

    def __init__(self, plan: CampaignPlan, workers: int) -> None:
        self.plan = plan
        self.workers = workers
        self.progress: dict[int, Progress] = {}
        self.findings: dict[tuple[JobSpec, str], Finding] = {}
        self.running = 0

    def update(self, progress: Progress) -> None:
        self.progress[progress.worker] = progress

    def add(self, found: Found, seconds: float) -> Finding | None:
        """Count ``found``; the new :class:`Finding` if its kind was not seen before."""
        key = (found.job, found.signature)
        known = self.findings.get(key)
        if known is not None:
            known.sightings += 1
            known.replays += found.replayed
            if known.trace is None:
                known.trace = found.trace
            return None
        finding = Finding(
            found.job,
            found.signature,
            found.failure,
            found.worker,
            seconds,
            found.trace,
            replays=int(found.replayed),
        )
        self.findings[key] = finding
        return finding

    def job_counts(self, label: str) -> JobCounts:
        """What every worker ran of one job."""
        counts = [p.jobs[label] for p in self.progress.values() if label in p.jobs]
        return JobCounts(
            sum(c.rounds for c in counts),
            sum(c.replays for c in counts),
            sum(c.examples for c in counts),
            sum(c.actions for c in counts),
        )

    @property
    def actions(self) -> int:
        return sum(c.actions for p in self.progress.values() for c in p.jobs.values())

    @property
    def examples(self) -> int:
        return sum(c.examples for p in self.progress.values() for c in p.jobs.values())

    def reached(self, machine: str) -> set[str]:
        """The situations some worker reached on ``machine``."""
        return {s for p in self.progress.values() for s in p.situations.get(machine, ())}

    def machines(self) -> list[str]:
        return sorted({job.machine for job in self.plan.jobs})

    def coverage(self) -> tuple[int, int]:
        """Situations reached, and situations there are, over the campaign's machines."""
        reached = sum(len(self.reached(m) & set(MACHINE_SITUATIONS[m])) for m in self.machines())
        return reached, sum(len(MACHINE_SITUATIONS[m]) for m in self.machines())

    def database_errors(self) -> tuple[int, str | None]:
        """Errors of the example database (all workers), and the latest one seen."""
        errors = sum(p.database_errors for p in self.progress.values())
        last = next(
            (p.last_database_error for p in self.progress.values() if p.last_database_error), None
        )
        return errors, last

    def line(self, seconds: float) -> str:
        """The live line: elapsed, actions (and their rate), test cases, situations reached
        of those there are, kinds of failure, workers running."""
        reached, total = self.coverage()
        rate = self.actions / seconds if seconds > 0 else 0.0
        failures = len(self.findings)
        errors, _ = self.database_errors()
        line = (
            f"{clock(seconds)}  {self.actions:,} actions ({rate:,.0f}/s)  "
            f"{self.examples:,} examples  coverage {reached}/{total}  "
            f"{failures} failure{'' if failures == 1 else 's'}  "
            f"{self.running}/{self.workers} workers"
        )
        return line + (f"  {errors} database errors" if errors else "")


class LiveLine:
    """The renderable of rich's ``Live``: the tally's line, fresh at every refresh."""

    def __init__(self, tally: Tally, elapsed: Callable[[], float]) -> None:
        self.tally = tally
        self.elapsed = elapsed

    def __rich__(self) -> Text:
        return Text(
            self.tally.line(self.elapsed()), style="bold", no_wrap=True, overflow="ellipsis"
        )


def clock(seconds: float) -> str:
    """``0:01:05``: hours, minutes, seconds."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def print_finding(console: Console, finding: Finding, found: Found) -> None:
    """A new kind of failure, as it arrives: who found it and how, the difference, the
    shrunk sequence, and where its trace is."""
    earlier = found.drawn_before
    if found.replayed:
        how = "replaying the example database" + (
            f" ({earlier:,} test cases drawn before)" if earlier else ", before drawing a test case"
        )
    else:
        how = "drawing test cases" + (
            f" ({earlier:,} drawn in its earlier rounds)" if earlier else " in its first round"
        )
    console.print(
        f"\n[bold red]FOUND[/bold red] {finding.job.label} at {clock(finding.seconds)} by "
        f"worker {found.worker} {how}",
        highlight=False,
        soft_wrap=True,
    )
    job = finding.job
    result = LevelResult(job_level(job), RunRecord(), 0.0, (finding.failure,), job.machine)
    print_failure(console, result, finding.failure)
    if found.trace is not None:
        written = "written" if found.trace_written else "already there"
        _line(console, f"  trace ({written}): {found.trace}")
        _line(console, f"  replay it with:  {_replay_line(found.trace)}")
    else:
        _line(console, f"  no trace: {found.trace_error}")


def _replay_line(trace: Path | str) -> str:
    """The command replaying ``trace``, naming its pool and manager when not built in."""
    from ...trace.files import TraceFileError, read_trace
    from ...trace.trust import replay_command

    try:
        return replay_command(str(trace), read_trace(Path(trace)).meta)
    except TraceFileError:
        return f"kvpool replay {trace}"


def _line(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def jobs_table(tally: Tally, title: str) -> Table:
    """Per job: rounds drawn and replayed, test cases, actions, kinds of failure."""
    table = Table(title=title)
    for column in ("job", "rounds", "replays", "examples", "actions", "failures"):
        table.add_column(column, justify="left" if column == "job" else "right", no_wrap=True)
    totals = JobCounts()
    for job in tally.plan.jobs:
        counts = tally.job_counts(job.label)
        kinds = sum(1 for j, _ in tally.findings if j == job)
        table.add_row(
            job.label,
            f"{counts.rounds:,}",
            f"{counts.replays:,}",
            f"{counts.examples:,}",
            f"{counts.actions:,}",
            f"[red]{kinds}[/red]" if kinds else "0",
        )
        totals = JobCounts(
            totals.rounds + counts.rounds,
            totals.replays + counts.replays,
            totals.examples + counts.examples,
            totals.actions + counts.actions,
        )
    table.add_section()
    table.add_row(
        "total",
        f"{totals.rounds:,}",
        f"{totals.replays:,}",
        f"{totals.examples:,}",
        f"{totals.actions:,}",
        str(len(tally.findings)),
    )
    return table


def findings_lines(tally: Tally) -> list[str]:
    """Every kind of failure found: where, by whom, how often, and its trace."""
    lines = []
    for number, finding in enumerate(tally.findings.values(), 1):
        seen = f"seen {finding.sightings} time{'s' if finding.sightings > 1 else ''}"
        lines.append(
            f"{number}. {finding.job.label}: {finding.signature} — first at "
            f"{clock(finding.seconds)} by worker {finding.worker}, {seen} "
            f"({finding.replays} replaying the database); trace {finding.trace or '-'}"
        )
    return lines


def coverage_lines(tally: Tally) -> list[str]:
    """``coverage: 18/18 pool situations`` per machine, and the ones never reached."""
    lines = []
    for machine in tally.machines():
        known = MACHINE_SITUATIONS[machine]
        reached = tally.reached(machine)
        missing = [s for s in known if s not in reached]
        line = f"coverage: {len(known) - len(missing)}/{len(known)} {machine} situations"
        lines.append(line + (f"; never reached: {', '.join(missing)}" if missing else ""))
    return lines
