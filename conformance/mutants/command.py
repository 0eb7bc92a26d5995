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

from .corpus import MUTANTS, MUTANTS_BY_NAME
from .run import MutantResult, kill


@click.command()
@click.option(
    "--budget",
    default=60.0,
    show_default=True,
    type=click.FloatRange(1.0),
    help="Seconds a mutant may survive before it counts as survived.",
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
@click.option("--seed", default=1, show_default=True, type=int)
@click.option(
    "--max-examples", default=150, show_default=True, type=click.IntRange(1), help="Per level."
)
def mutants(
    budget: float, jobs: int, only: tuple[str, ...], list_only: bool, seed: int, max_examples: int
) -> None:
    """Run the suite against every mutant of kvpool.impl (a real bug, one patch away from
    correct) and report which were killed, how fast, by which run, and how short the
    shrunk trace was. Exit 1 if any mutant survived."""
    console = Console()
    if list_only:
        table = Table(title=f"{len(MUTANTS)} mutants of kvpool.impl")
        table.add_column("mutant", no_wrap=True)
        table.add_column("bug")
        table.add_column("file")
        for mutant in MUTANTS:
            table.add_row(mutant.name, mutant.bug, f"impl/{mutant.file}")
        console.print(table)
        return
    unknown = [n for n in only if n not in MUTANTS_BY_NAME]
    if unknown:
        console.print(f"[red]error:[/red] unknown mutant(s) {', '.join(unknown)}; see --list")
        sys.exit(2)
    names = list(only) or [m.name for m in MUTANTS]
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
        futures = [pool.submit(kill, n, seed, max_examples, budget) for n in names]
        for future in as_completed(futures):
            results.append(future.result())
            progress.advance(task)
    results.sort(key=lambda r: names.index(r.name))
    table = Table(title="kvpool mutants")
    for column in ("mutant", "result", "time", "trace", "caught by"):
        table.add_column(column, justify="right" if column in ("time", "trace") else "left")
    for r in results:
        table.add_row(
            r.name,
            "[green]killed[/green]" if r.killed else "[red]SURVIVED[/red]",
            f"{r.seconds:.1f}s",
            str(r.trace_length) if r.killed else "-",
            f"{r.caught_by}: {r.message[:60]}" if r.killed else "",
        )
    console.print(table)
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
    survived = [r.name for r in results if not r.killed]
    if survived:
        console.print(f"[red]survived:[/red] {', '.join(survived)}", highlight=False)
        sys.exit(1)
