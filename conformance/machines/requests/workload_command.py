"""``kvpool workload``: a seeded serving workload in lockstep with the spec's manager."""

from __future__ import annotations

import sys

import click
from kvpool.spec import PoolConfig, get_profile
from kvpool.spec.manager import KVGroup, ManagerConfig
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ...report import action_line, properties_table
from ...run_options import (
    blocks_option,
    manager_option,
    profile_option,
    seed_option,
    target_option,
)
from ...targets.description import TargetDescription
from ...targets.loading import TargetLoadError, choose_profile, load_manager, load_target
from ...usage import EXIT_FINDING, EXIT_PASS, fail_usage
from ..pool.levels import Level
from ..pool.lockstep import Nonconformance, RunRecord
from ..pool.runner import LevelResult
from .machine import RequestRun, RunBuilder
from .runner import ON_MANAGER, ON_POOL, manager_builder, pool_builder
from .target import RequestSetup
from .workload import Workload, WorkloadParams, WorkloadStats


@click.command()
@target_option("The pool to drive.")
@manager_option("Also run the workload on this manager target ('auto': the target's own, 'none').")
@profile_option("Expected behaviour (default: the target's own profile, else seed).")
@click.option("--requests", "-r", default=200, show_default=True, type=click.IntRange(1))
@click.option(
    "--prefixes", default=6, show_default=True, type=click.IntRange(1), help="System prompts."
)
@click.option(
    "--zipf",
    default=1.2,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Popularity skew of the system prompts (0 = uniform).",
)
@click.option("--prefix-tokens", default=48, show_default=True, type=click.IntRange(0))
@click.option(
    "--prompt-tokens",
    default="4-40",
    show_default=True,
    help="A turn's own new tokens, as MIN-MAX.",
)
@click.option(
    "--output-tokens", default="1-24", show_default=True, help="Tokens decoded, as MIN-MAX."
)
@click.option("--turns", default=3, show_default=True, type=click.IntRange(1))
@click.option("--concurrency", default=6, show_default=True, type=click.IntRange(1))
@click.option(
    "--salted",
    default=0.1,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Fraction of sessions with a cache_salt.",
)
@blocks_option(64, None, "Blocks in the pool (num_gpu_blocks, the null block included).")
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(1))
@click.option(
    "--groups",
    default="full",
    show_default=True,
    help="KV-cache groups, a comma list of 'full' and 'sliding:N' (a window of N blocks).",
)
@click.option("--hash-block-size", default=16, show_default=True, type=click.IntRange(1))
@seed_option(0, "The workload's seed.")
def workload(
    target: TargetDescription,
    manager: TargetDescription | str,
    profile: str | None,
    requests: int,
    prefixes: int,
    zipf: float,
    prefix_tokens: int,
    prompt_tokens: str,
    output_tokens: str,
    turns: int,
    concurrency: int,
    salted: float,
    blocks: int,
    block_size: int,
    groups: str,
    hash_block_size: int,
    seed: int,
) -> None:
    """Run a seeded serving workload in lockstep with the spec's manager.

    Shared system prompts (Zipf popularity), multi-turn sessions, mixed lengths and
    preemption when the pool runs short. The spec's manager drives the target pool; the
    target's own manager (if any) runs the same workload against the spec's manager. Every
    request-level property is checked after every step; the first difference stops the
    run (exit 1) and prints the last actions.
    """
    console = Console()
    try:
        kv_groups = _groups(groups)
        params = WorkloadParams(
            requests=requests,
            prefixes=prefixes,
            zipf=zipf,
            prefix_tokens=prefix_tokens,
            prompt_tokens=_span(prompt_tokens, "--prompt-tokens"),
            output_tokens=_span(output_tokens, "--output-tokens"),
            turns=turns,
            concurrency=concurrency,
            salted=salted,
            partial_entries=not any(g.is_sliding for g in kv_groups),
            seed=seed,
        )
        chosen_profile = get_profile(profile or choose_profile(target).name)
        factory, name = load_target(target)
        manager_factory, manager_name = load_manager(manager, target)
        if block_size % hash_block_size:
            raise click.BadParameter("--block-size must be a multiple of --hash-block-size")
        setup = RequestSetup(
            ManagerConfig(block_size, kv_groups),
            PoolConfig(blocks, hash_block_size=hash_block_size),
        )
    except (click.BadParameter, KeyError, TargetLoadError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        fail_usage(console, message)
    runs: list[tuple[Level, RunBuilder]] = [(ON_POOL, pool_builder(factory, chosen_profile))]
    if manager_factory is not None:
        runs.append((ON_MANAGER, manager_builder(manager_factory, chosen_profile)))
    table = Table(title=f"kvpool workload — target {name}, manager {manager_name}, seed {seed}")
    for column in ("run", "result", "steps", "admitted", "refused", "preempted", "hits"):
        table.add_column(
            column, justify="left" if column in ("run", "result") else "right", no_wrap=True
        )
    failed = False
    records: list[RunRecord] = []
    for on, build in runs:
        label = f"requests/{on.name}"
        record = RunRecord()
        run = build(setup, record)
        records.append(record)
        stats, problem = _run_workload(console, label, params, run)
        verdict = "[green]pass[/green]" if problem is None else "[red]FAIL[/red]"
        table.add_row(
            label,
            verdict,
            str(record.steps),
            str(stats.counts["admit"] - stats.counts["admission refused"]),
            str(stats.counts["admission refused"]),
            str(stats.counts["preempt"]),
            f"{stats.hit_rate:.0%}",
        )
        if problem is not None:
            failed = True
            console.print(f"[bold red]{label}: {problem}[/bold red]", highlight=False)
            console.print("  last actions:")
            for action in record.trace[-8:]:
                console.print(f"    {action_line(action)}", markup=False, highlight=False)
    console.print(table)
    checked = properties_table(
        [
            LevelResult(on, record, 0.0, (), "requests")
            for (on, _), record in zip(runs, records, strict=True)
        ]
    )
    if checked is not None:
        console.print(checked)
    sys.exit(EXIT_FINDING if failed else EXIT_PASS)


def _run_workload(
    console: Console, label: str, params: WorkloadParams, run: RequestRun
) -> tuple[WorkloadStats, Exception | None]:
    """One workload on one run, with a progress bar; the stats and the failure, if any."""
    load = Workload(params)
    with Progress(
        TextColumn(f"{label:<17}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} requests"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(label, total=params.requests)

        def tick(stats: WorkloadStats) -> None:
            progress.update(task, completed=min(load.started, params.requests))

        try:
            return load.run(run.apply, tick), None
        except (Nonconformance, RuntimeError) as exc:
            return load.stats, exc


def _groups(value: str) -> tuple[KVGroup, ...]:
    groups = []
    for part in (p.strip() for p in value.split(",")):
        kind, _, window = part.partition(":")
        if kind == "full" and not window:
            groups.append(KVGroup())
        elif kind == "sliding" and window.isdigit() and int(window) > 0:
            groups.append(KVGroup(sliding_window_blocks=int(window)))
        else:
            raise click.BadParameter(
                f"--groups takes a comma list of 'full' and 'sliding:N' (N blocks), not {part!r}"
            )
    return tuple(groups)


def _span(value: str, option: str) -> tuple[int, int]:
    low, sep, high = value.partition("-")
    try:
        span = (int(low), int(high if sep else low))
    except ValueError:
        raise click.BadParameter(f"{option} takes MIN-MAX, like 4-40, not {value!r}") from None
    if not 0 <= span[0] <= span[1]:
        raise click.BadParameter(f"{option} needs 0 <= MIN <= MAX, not {value!r}")
    return span
