"""``kvpool fuzz``: a long campaign of the lockstep machines on every core."""

from __future__ import annotations

import os
import random
import sys

import click
from kvpool.spec import PROFILES, PoolConfig, get_profile
from kvpool.spec.manager import ManagerConfig
from rich.console import Console

from ...engines.vllm_api.features import inferred_lines
from ...exits import EXIT_BUG, EXIT_FINDING, EXIT_INTERRUPTED, EXIT_PASS, EXIT_UNDECIDED
from ...install import extra_hint
from ...machines.pool.levels import LEVELS, MACHINES, REQUEST_MIN_BLOCKS
from ...machines.requests.target import RequestSetup
from ...run_options import (
    blocks_option,
    machines_option,
    manager_option,
    profile_option,
    seed_option,
    steps_option,
    target_option,
    trace_dir_option,
)
from ...targets.description import TargetDescription
from ...targets.loading import TargetLoadError, choose_profile, load_manager, load_target
from ...usage import comma_names, fail_usage
from .database import DatabaseError, open_database
from .plan import CampaignPlan, DatabaseSpec, JobSpec
from .sharing import DatabaseErrors
from .status import clock, coverage_lines, findings_lines, jobs_table
from .supervise import CRASHED, INTERRUPTED, Outcome, supervise


def _until(duration: float, max_actions: int | None) -> str:
    """``for 0:10:00``, ``until 1,000,000 actions``, both, or ``until Ctrl-C``."""
    limits = [f"for {clock(duration)}"] if duration else []
    limits += [f"until {max_actions:,} actions"] if max_actions else []
    return " or ".join(limits) or "until Ctrl-C"


@click.command()
@target_option("The pool to fuzz, as for kvpool conform: impl, spec, vllm==X.Y.Z, module:factory.")
@profile_option(
    "Expected behaviour (default: the target's own profile, else seed). Known: "
    + ", ".join(PROFILES)
    + "."
)
@click.option(
    "--level",
    "-l",
    "levels",
    default="safety,order,robustness",
    show_default=True,
    help="Comma-separated levels of the pool machine.",
)
@machines_option(
    "Comma-separated machines: pool (at each --level) and requests (on the pool, and "
    "on the target's manager if any)."
)
@manager_option("The manager the requests machine checks: auto, none, or module:factory.")
@click.option(
    "--workers",
    "-w",
    default=os.cpu_count() or 1,
    show_default="every core",
    type=click.IntRange(1),
    help="Worker processes; each runs every job in turn.",
)
@click.option("--hours", type=click.FloatRange(0.0), default=0.0, help="Run this long ...")
@click.option("--minutes", type=click.FloatRange(0.0), default=0.0, help="... plus this ...")
@click.option(
    "--seconds",
    type=click.FloatRange(0.0),
    default=0.0,
    help="... plus this (none of the three: until Ctrl-C).",
)
@click.option(
    "--redis",
    "redis_url",
    default=None,
    metavar="URL",
    help="Share failing examples with every campaign using this Redis server "
    "(redis://host:6379/0), on this machine and others; needs the redis client: "
    f"{extra_hint('fuzz')}.",
)
@click.option(
    "--db-dir",
    default=".kvpool-fuzz",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The example database on this machine (Hypothesis's directory format).",
)
@trace_dir_option("each kind of failure's")
@steps_option
@blocks_option()
@click.option(
    "--examples-per-round",
    default=100,
    show_default=True,
    type=click.IntRange(1),
    help="Test cases a worker draws for one job before it turns to the next.",
)
@seed_option(help="The campaign's seed (default: random).")
@click.option(
    "--max-actions",
    type=click.IntRange(1),
    default=None,
    help="Stop once the workers ran this many lockstep actions in all (and the round "
    "each is in); with a duration, whichever comes first.",
)
@click.option(
    "--stop-on-failure",
    is_flag=True,
    help="Stop the whole campaign at the first failure found.",
)
@click.option(
    "--status-every",
    default=60.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds between status lines when the output is not a terminal (a terminal "
    "shows one live line instead).",
)
def fuzz(
    target: TargetDescription,
    profile: str | None,
    levels: str,
    machines: str,
    manager: TargetDescription | str,
    workers: int,
    hours: float,
    minutes: float,
    seconds: float,
    redis_url: str | None,
    db_dir: str,
    trace_dir: str,
    steps: int,
    blocks: int,
    examples_per_round: int,
    seed: int | None,
    max_actions: int | None,
    stop_on_failure: bool,
    status_every: float,
) -> None:
    """Fuzz TARGET against the spec on every core until the deadline or Ctrl-C.

    Each worker runs the lockstep machines of kvpool conform in turn, round after round,
    with fresh seeds. Failing examples go into Hypothesis's example database (--db-dir,
    and with --redis a server shared by campaigns on other machines); every worker
    replays what any worker stored before drawing new test cases, so a failure found
    anywhere replays everywhere. Each kind of failure is shrunk, printed and its trace
    written the moment it is found.

    Exit status: 0 no failure, 1 a failure was found, 2 a usage or loading error, 4 a
    worker failed (a bug in kvpool).
    """
    console = Console()
    try:
        level_names = comma_names(levels, tuple(LEVELS), "level")
        machine_names = comma_names(machines, MACHINES, "machine")
        chosen_profile = get_profile(profile or choose_profile(target).name)
        factory, name = load_target(target)
        manager_factory, manager_name = load_manager(manager, target)
    except (click.BadParameter, KeyError, TargetLoadError) as exc:
        fail_usage(console, exc.args[0] if isinstance(exc, KeyError) else str(exc))
    try:
        probe = factory(PoolConfig(2), chosen_profile)
        if manager_factory is not None:
            manager_factory(RequestSetup(ManagerConfig(1), PoolConfig(2)), chosen_profile)
    except Exception as exc:  # the user's factory failed to build a pool or a manager
        fail_usage(console, f"target {name!r} could not be built: {type(exc).__name__}: {exc}")
    database = DatabaseSpec(db_dir, redis_url)
    try:
        open_database(database, DatabaseErrors())
    except DatabaseError as exc:
        fail_usage(console, str(exc))
    jobs = [JobSpec("pool", level) for level in level_names if "pool" in machine_names]
    if "requests" in machine_names:
        jobs.append(JobSpec("requests", "pool"))
        if manager_factory is not None:
            jobs.append(JobSpec("requests", "manager"))
    plan = CampaignPlan(
        target=target.text,
        profile=chosen_profile.name,
        manager=manager_name,
        jobs=tuple(jobs),
        steps=steps,
        blocks=blocks,
        request_blocks=max(REQUEST_MIN_BLOCKS, blocks),
        examples_per_round=examples_per_round,
        trace_dir=trace_dir,
        database=database,
        seed=seed if seed is not None else random.randrange(2**32),
    )
    duration = hours * 3600 + minutes * 60 + seconds
    console.print(
        f"kvpool fuzz: target [bold]{name}[/bold], profile {plan.profile}, "
        f"jobs {', '.join(j.label for j in jobs)}, seed {plan.seed}, "
        f"database {database.describe()}, " + _until(duration, max_actions),
        highlight=False,
        soft_wrap=True,
    )
    for line in inferred_lines(probe, engine=target.engine):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    outcome = supervise(
        plan,
        workers,
        duration or None,
        console,
        stop_on_failure=stop_on_failure,
        max_actions=max_actions,
        status_every=status_every,
    )
    tally = outcome.tally
    rate = tally.actions / outcome.seconds if outcome.seconds > 0 else 0.0
    console.print(
        jobs_table(
            tally, f"kvpool fuzz — target {name}, profile {plan.profile}, {workers} workers"
        ),
    )
    for line in coverage_lines(tally):
        console.print(line, highlight=False, soft_wrap=True)
    errors, last = tally.database_errors()
    if errors:
        console.print(
            f"the example database failed {errors} time(s); last: {last}",
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for number in outcome.terminated:
        console.print(
            f"worker {number} did not stop when asked and was terminated",
            style="yellow",
            highlight=False,
        )
    for crash in outcome.crashes:
        console.print(crash, style="red", markup=False, highlight=False, soft_wrap=True)
    if tally.findings:
        console.print("\nfailures found (one line per kind):")
        for line in findings_lines(tally):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"{tally.actions:,} lockstep actions in {clock(outcome.seconds)} ({rate:,.0f}/s), "
        f"{tally.examples:,} test cases; {outcome.reason}",
        highlight=False,
        soft_wrap=True,
    )
    status = campaign_status(outcome)
    if status == EXIT_FINDING:
        kinds = len(tally.findings)
        console.print(f"[red]{kinds} kind{'s' if kinds > 1 else ''} of failure found[/red]")
    elif status == EXIT_UNDECIDED:
        console.print(
            "[yellow]undecided: a worker hung and was killed before its round ended[/yellow]"
        )
    elif status == EXIT_INTERRUPTED:
        console.print("[yellow]interrupted: no failure found before Ctrl-C[/yellow]")
    elif status == EXIT_PASS:
        console.print("[green]no failure found[/green]")
    sys.exit(status)


def campaign_status(outcome: Outcome) -> int:
    """The campaign's exit status: a finding stands whatever ended the campaign (1); then
    kvpool's own failure in a worker (4); Ctrl-C (130); a worker that hung and was killed
    leaves its round undecided (5); else the campaign ran to its end and passed (0)."""
    if outcome.tally.findings:
        return EXIT_FINDING
    if outcome.crashes or outcome.reason == CRASHED:
        return EXIT_BUG
    if outcome.reason == INTERRUPTED:
        return EXIT_INTERRUPTED
    if outcome.terminated:
        return EXIT_UNDECIDED
    return EXIT_PASS
