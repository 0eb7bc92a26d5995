"""The ``kvpool diff`` command: pool A against pool B, no spec in the loop."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ...machines.pool.levels import ORDER, SAFETY
from ...machines.pool.lockstep import RunRecord
from ...run_options import (
    blocks_option,
    max_examples_option,
    max_findings_option,
    seed_option,
    steps_option,
    trace_dir_option,
)
from ...targets.description import TargetDescription
from ...targets.loading import TargetLoadError
from ...targets.options import TARGET
from ...trace.files import TraceFileError
from ...trace.model import Trace
from ...trace.trust import replay_command
from ...usage import EXIT_FINDING, EXIT_PASS, fail_usage
from .loading import Pair, load_pair
from .output import differences_table, print_difference, print_header, print_summary
from .run import DiffResult, run_diff
from .save import save_difference

LEVELS = {SAFETY.name: SAFETY, ORDER.name: ORDER}


@click.command()
@click.argument("pool_a", metavar="A", type=TARGET)
@click.argument("pool_b", metavar="B", type=TARGET)
@click.option(
    "--level",
    "-l",
    type=click.Choice(list(LEVELS)),
    default="order",
    show_default=True,
    help="order: the exact free queue and the very same block ids; safety: set "
    "semantics (B's block ids may differ from A's when the blocks are interchangeable).",
)
@click.option(
    "--profile-a",
    default=None,
    help="The contract A is held to when actions are drawn (default: its own profile, "
    "e.g. vllm-0.24 for vllm==0.24.0, else seed).",
)
@click.option("--profile-b", default=None, help="The same for B.")
@click.option(
    "--shared-only",
    is_flag=True,
    help="Draw only the actions both pools take (by default an action only one pool takes "
    "is drawn too, and taking it is a difference).",
)
@max_examples_option("fresh pairs of pools")
@steps_option
@seed_option()
@blocks_option()
@max_findings_option("differences")
@trace_dir_option("each difference's")
def diff(
    pool_a: TargetDescription,
    pool_b: TargetDescription,
    level: str,
    profile_a: str | None,
    profile_b: str | None,
    shared_only: bool,
    max_examples: int,
    steps: int,
    seed: int | None,
    blocks: int,
    max_findings: int,
    trace_dir: str,
) -> None:
    """Run two pools A and B in lockstep against each other and show every difference.

    No spec judges: the same actions go to both pools, and their results, events,
    reuse-watcher firings and whatever both show of their state (free queue, ref counts,
    keys) must agree. Each difference is shrunk to the shortest action sequence that shows
    it and written as a trace: `kvpool show` renders it, `kvpool replay` re-runs A against B.

    A and B are targets as for `kvpool conform --target`: impl, spec, vllm==X.Y.Z (a
    release, fetched once), vllm@PATH (a source tree or wheel), module:factory. Actions
    are drawn inside both pools' contracts (their profiles). An action only one pool takes
    (a new argument, a new operation) is drawn too, inside that pool's contract, and taking
    it is a difference; --shared-only leaves such actions out. The header says what was
    drawn, what was left out and why.

    \b
    Examples:
      kvpool diff vllm==0.33.0 vllm@./vllm     what a pull request changes
      kvpool diff mypkg.pool:make vllm==0.33.0 a re-implementation against a release
      kvpool diff vllm==0.23.0 vllm==0.24.0    where freed unkeyed blocks go
      kvpool diff vllm==0.26.0 vllm==0.27.1    0.27's caching-off frees
      kvpool diff impl impl --level safety     two copies: no difference

    Exit status: 0 no difference, 1 differences, 2 a usage or loading error.
    """
    console = Console()
    try:
        pair = load_pair(pool_a, pool_b, profile_a, profile_b, shared_only)
    except (TargetLoadError, KeyError) as exc:
        fail_usage(console, exc.args[0] if isinstance(exc, KeyError) else str(exc))
    chosen = LEVELS[level]
    run_seed = seed if seed is not None else random.randrange(2**32)
    print_header(console, pair, chosen, run_seed)
    with Progress(
        TextColumn(f"diff/{chosen.name:<8}"),
        BarColumn(),
        TextColumn("{task.fields[examples]} examples, {task.fields[steps]} steps"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        result = run_diff(
            pair,
            chosen,
            max_examples=max_examples,
            steps=steps,
            seed=run_seed,
            max_blocks=blocks,
            max_findings=max_findings,
            on_example=_ticker(progress, max_examples),
        )
    print_summary(console, result)
    if not result.differences:
        console.print("[green]no difference: A and B agree on every action drawn[/green]")
        sys.exit(EXIT_PASS)
    _report(console, pair, result, run_seed, Path(trace_dir))
    console.print(
        f"Reproduce with: kvpool diff {pool_a.text} {pool_b.text} --level {chosen.name} "
        f"--profile-a {pair.a.profile.name} --profile-b {pair.b.profile.name} "
        + ("--shared-only " if shared_only else "")
        + f"--seed {run_seed} --max-examples {max_examples} --steps {steps} --blocks {blocks}",
        highlight=False,
        soft_wrap=True,
    )
    sys.exit(EXIT_FINDING)


def _ticker(progress: Progress, total: int) -> Callable[[RunRecord], None]:
    task = progress.add_task("diff", total=total, examples=0, steps=0)

    def tick(record: RunRecord) -> None:
        progress.update(
            task,
            completed=min(record.examples, total),
            examples=record.examples,
            steps=record.steps,
        )

    return tick


def _report(console: Console, pair: Pair, result: DiffResult, seed: int, trace_dir: Path) -> None:
    """Write each difference's trace, then the table and each difference side by side."""
    recorded: list[Trace | None] = []
    paths: list[Path | None] = []
    problems: list[str] = []
    for number, difference in enumerate(result.differences, 1):
        if not difference.trace:  # the pools differ as built: nothing to replay
            recorded.append(None)
            paths.append(None)
            continue
        try:
            saved, path = save_difference(pair, result.level, seed, difference, trace_dir, number)
        except (TraceFileError, TargetLoadError, ValueError, OSError) as exc:
            problems.append(f"difference {number}: no trace written: {exc}")
            recorded.append(None)
            paths.append(None)
            continue
        recorded.append(saved)
        paths.append(path)
    console.print(differences_table(result, paths))
    for number, (difference, trace) in enumerate(zip(result.differences, recorded, strict=True), 1):
        print_difference(console, number, trace, difference.message, difference.config)
    for problem in problems:
        console.print(problem, markup=False, highlight=False, soft_wrap=True)
    written = [
        (p, t) for p, t in zip(paths, recorded, strict=True) if p is not None and t is not None
    ]
    if written:
        path, trace = written[0]
        console.print(
            f"\nShow one with: kvpool show {path}\n"
            f"Replay it with: {replay_command(str(path), trace.meta)}",
            highlight=False,
            soft_wrap=True,
        )
