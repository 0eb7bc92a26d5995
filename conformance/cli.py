"""The ``kvpool`` command."""

from __future__ import annotations

import random
import sys

import click
from kvpool.spec import PROFILES, get_profile
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from .levels import LEVELS
from .lockstep import RunRecord
from .report import coverage_table, print_failure, results_table
from .runner import LevelResult, run_level
from .targets.loading import BUILT_IN, TargetLoadError, load_target

EXIT_PASS, EXIT_NONCONFORMANCE, EXIT_USAGE = 0, 1, 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """kvpool: the reference spec and conformance suite for paged KV-cache block pools.

    \b
    Start here:
      kvpool conform                         check the built-in pool at every level
      kvpool conform --target mypkg.pool:make_pool
                                             check your own vLLM-style pool
      kvpool targets                         what can be checked, and the profiles
    """


def _levels(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in LEVELS]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown level(s) {', '.join(unknown) or value!r}; choose from {', '.join(LEVELS)}"
        )
    return names


@main.command()
@click.option(
    "--target",
    "-t",
    default="impl",
    show_default=True,
    help="The pool to check: 'impl' (ours), 'spec' (self-check), or "
    "'module:factory' — a factory building a pool with vLLM's BlockPool API "
    "(called with num_gpu_blocks=, enable_caching=, hash_block_size=, "
    "enable_kv_cache_events=) or a Target from (config, profile).",
)
@click.option(
    "--profile",
    "-p",
    default="seed",
    show_default=True,
    help=f"Which pool behaviour is expected: {', '.join(PROFILES)}.",
)
@click.option(
    "--level",
    "-l",
    "levels",
    default="safety,order,robustness",
    show_default=True,
    help="Comma-separated levels: safety (set semantics, any eviction order), order "
    "(the profile's exact eviction order), robustness (out-of-contract input "
    "refused, pool unchanged).",
)
@click.option(
    "--max-examples",
    "-n",
    default=150,
    show_default=True,
    type=click.IntRange(1),
    help="Test cases (fresh pools) per level.",
)
@click.option(
    "--steps",
    default=40,
    show_default=True,
    type=click.IntRange(1),
    help="Most actions per test case.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed for drawing actions; the run prints the one it used.",
)
@click.option(
    "--blocks",
    default=8,
    show_default=True,
    type=click.IntRange(2, 4096),
    help="Largest pool drawn (num_gpu_blocks, the null block included). Small pools "
    "reach eviction, duplicates and exhaustion sooner.",
)
@click.option(
    "--coverage/--no-coverage",
    default=True,
    show_default=True,
    help="Print which actions and situations the run reached.",
)
def conform(
    target: str,
    profile: str,
    levels: str,
    max_examples: int,
    steps: int,
    seed: int | None,
    blocks: int,
    coverage: bool,
) -> None:
    """Run the lockstep conformance suite: the spec and TARGET, step by step.

    Every action is applied to both; results, reuse-watcher firings, events, and whatever
    the target shows of its state (free queue, ref counts, keys, free-list links) must
    agree. A difference is shrunk to a minimal action sequence and printed.

    Exit status: 0 every level passed, 1 a nonconformance, 2 a usage or loading error.
    """
    console = Console()
    try:
        level_names = _levels(levels)
        chosen_profile = get_profile(profile)
        factory, name = load_target(target)
    except (click.BadParameter, KeyError, TargetLoadError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        console.print(f"[red]error:[/red] {message}", highlight=False)
        sys.exit(EXIT_USAGE)
    try:
        from kvpool.spec import PoolConfig

        factory(PoolConfig(2), chosen_profile)
    except Exception as exc:  # the user's factory failed to build a pool
        console.print(
            f"[red]error:[/red] target {name!r} could not build a pool: "
            f"{type(exc).__name__}: {exc}",
            highlight=False,
        )
        sys.exit(EXIT_USAGE)
    run_seed = seed if seed is not None else random.randrange(2**32)
    console.print(
        f"kvpool conform: target [bold]{name}[/bold], profile {chosen_profile.name}, "
        f"levels {', '.join(level_names)}, seed {run_seed}"
    )
    results: list[LevelResult] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[examples]} examples, {task.fields[steps]} steps"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        for level_name in level_names:
            task = progress.add_task(f"{level_name:<10}", total=max_examples, examples=0, steps=0)

            def tick(record: RunRecord, task: TaskID = task) -> None:
                progress.update(
                    task,
                    completed=min(record.examples, max_examples),
                    examples=record.examples,
                    steps=record.steps,
                )

            result = run_level(
                factory,
                chosen_profile,
                LEVELS[level_name],
                max_examples=max_examples,
                steps=steps,
                seed=run_seed,
                max_blocks=blocks,
                on_example=tick,
            )
            progress.update(task, completed=max_examples)
            results.append(result)
    console.print(results_table(name, chosen_profile.name, results))
    if coverage:
        console.print(coverage_table(results))
    failed = [r for r in results if not r.passed]
    for result in failed:
        print_failure(console, result)
    if failed:
        console.print(
            f"\nReproduce with: kvpool conform --target {target} --profile {profile} "
            f"--level {failed[0].level.name} --seed {run_seed} "
            f"--max-examples {max_examples} --steps {steps} --blocks {blocks}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_NONCONFORMANCE)
    console.print("[green]every level passed[/green]")


@main.command()
def targets() -> None:
    """List the built-in targets and the profiles."""
    console = Console()
    for name, (_, description) in BUILT_IN.items():
        console.print(f"  [bold]{name:<8}[/bold] {description}")
    console.print("  [bold]module:factory[/bold] your own pool (see kvpool conform --help)")
    console.print("\nprofiles:")
    for profile in PROFILES.values():
        console.print(f"  [bold]{profile.name:<8}[/bold] {profile.description}")
