"""``kvpool mutants``: score the suite against the mutant corpus."""

from __future__ import annotations

import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ...run_options import max_examples_option, seed_option
from ...usage import EXIT_BUG, EXIT_FINDING, EXIT_UNDECIDED, EXIT_USAGE
from .corpus import MUTANTS, MUTANTS_BY_NAME
from .run import MutantResult, clean_run, kill


@click.command()
@click.option(
    "--budget",
    default=60.0,
    show_default=True,
    type=click.FloatRange(1.0),
    help="CPU seconds (of the process checking it) a mutant may survive before it counts "
    "as survived; a busy machine slows the wall clock, not this.",
)
@click.option(
    "--jobs",
    "-j",
    default=os.cpu_count() or 1,
    show_default=True,
    type=click.IntRange(1),
    help="Mutants checked at once (processes).",
)
@click.option("--only", multiple=True, help="Only this mutant (repeatable); see --list.")
@click.option("--list", "list_only", is_flag=True, help="List the mutants and their bugs.")
@seed_option(1)
@max_examples_option(per=" per level", short=False)
def mutants(
    budget: float, jobs: int, only: tuple[str, ...], list_only: bool, seed: int, max_examples: int
) -> None:
    """Run the suite against every mutant of kvpool.impl (a real bug, one patch away from
    correct) and report which were killed, how fast, by which run, and how short the
    shrunk trace was.

    The unmutated pool runs first under the same settings and must pass. A kill is a
    nonconformance of the mutant that shows what its corpus entry says (an observable or
    a rule). A finding (1) is a mutant that survived or was killed by something else (a
    wrong kill, a crash alone); undecided (5): the clean pool fails at these settings; a bug
    in kvpool (4): a run broke (the harness or the spec failed, not the mutant)."""
    console = Console()
    if list_only:
        table = Table(title=f"{len(MUTANTS)} mutants of kvpool.impl")
        table.add_column("mutant", no_wrap=True)
        table.add_column("bug")
        table.add_column("its kill shows")
        table.add_column("file")
        for mutant in MUTANTS:
            table.add_row(mutant.name, mutant.bug, mutant.shows, f"impl/{mutant.file}")
        console.print(table)
        return
    unknown = [n for n in only if n not in MUTANTS_BY_NAME]
    if unknown:
        console.print(f"[red]error:[/red] unknown mutant(s) {', '.join(unknown)}; see --list")
        sys.exit(EXIT_USAGE)
    names = list(only) or [m.name for m in MUTANTS]
    with console.status("the unmutated pool first, at the same settings"):
        clean = clean_run(seed, max_examples)
    if clean.problem is not None:
        console.print(
            f"[red]error:[/red] the unmutated pool fails at these settings ({clean.caught_by}, "
            f"seed {seed}): {clean.problem}; a kill would mean nothing, no mutant was run",
            highlight=False,
        )
        sys.exit(EXIT_UNDECIDED)
    console.print(f"the unmutated pool passes every level ({clean.seconds:.1f}s)", highlight=False)
    results: list[MutantResult] = []
    with (
        Progress(
            TextColumn("mutants"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress,
        ProcessPoolExecutor(max_workers=jobs) as pool,
    ):
        task = progress.add_task("mutants", total=len(names))
        futures = [pool.submit(kill, MUTANTS_BY_NAME[n], seed, max_examples, budget) for n in names]
        for future in as_completed(futures):
            results.append(future.result())
            progress.advance(task)
    results.sort(key=lambda r: names.index(r.name))
    console.print(_table(results))
    killed = [r for r in results if r.killed]
    if killed:
        times = [r.seconds for r in killed]
        lengths = [r.trace_length for r in killed]
        console.print(
            f"{len(killed)} of {len(results)} killed; time to kill median "
            f"{statistics.median(times):.2f}s, max {max(times):.1f}s; shrunk trace median "
            f"{statistics.median(lengths)} actions",
            highlight=False,
        )
    for r in results:
        if r.outcome == "wrong kill":
            console.print(
                f"[red]wrong kill:[/red] {r.name} must be caught showing {r.shows!r}, "
                f"{r.caught_by} reported: {r.message}",
                highlight=False,
            )
        elif r.outcome == "error":
            where = f" ({r.caught_by})" if r.caught_by else ""
            console.print(f"[red]error:[/red] {r.name}{where}: {r.message}", highlight=False)
    survived = [r.name for r in results if r.outcome == "survived"]
    if survived:
        console.print(f"[red]survived:[/red] {', '.join(survived)}", highlight=False)
    if any(r.outcome == "error" for r in results):
        sys.exit(EXIT_BUG)
    if len(killed) < len(results):
        sys.exit(EXIT_FINDING)


#: How each outcome reads in the table.
OUTCOMES = {
    "killed": "[green]killed[/green]",
    "survived": "[red]SURVIVED[/red]",
    "wrong kill": "[red]WRONG KILL[/red]",
    "error": "[red]ERROR[/red]",
}


def _table(results: list[MutantResult]) -> Table:
    table = Table(title="kvpool mutants")
    for column in ("mutant", "result", "time", "trace", "caught by"):
        right = column in ("time", "trace")
        table.add_column(column, justify="right" if right else "left", overflow="fold")
    for r in results:
        table.add_row(
            r.name,
            OUTCOMES[r.outcome],
            f"{r.seconds:.1f}s",
            str(r.trace_length) if r.trace_length else "-",
            f"{r.caught_by}: {r.message[:60]}" if r.caught_by else r.message[:60],
        )
    return table
