"""Running a conform :class:`~.plan.Plan`: the pool machine at each level, then
the request machine's runs, with a progress bar; the results, in the order they ran."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ...machines.pool.contracts import checking_contracts
from ...machines.pool.levels import level_for
from ...machines.pool.lockstep import RunRecord
from ...machines.pool.runner import LevelResult, run_level
from ...machines.requests.runner import run_requests
from .plan import Plan


@dataclass
class Execution:
    """What ran: each run's result, and the runs ``--fail-fast`` left out."""

    results: list[LevelResult] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)

    def stopped(self, plan: Plan) -> bool:
        return plan.fail_fast and any(r.failures for r in self.results)


def execute(plan: Plan, console: Console) -> Execution:
    """Every run of ``plan``, in turn; a target's surface the run could not call raises
    :class:`~.engine.surface.SurfaceMismatch` (the caller's usage error)."""
    done = Execution()
    options = plan.options
    with (
        checking_contracts(options.check_contracts),
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[examples]} examples, {task.fields[steps]} steps"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress,
    ):
        ticker = _ticker(progress, options.max_examples)
        for level_name in plan.pool_levels:
            if done.stopped(plan):
                done.not_run.append(f"pool/{level_name}")
                continue
            level = replace(level_for(level_name, plan.consumer_model), expected=plan.expected)
            done.results.append(
                run_level(
                    plan.factory,
                    plan.profile,
                    level,
                    max_examples=options.max_examples,
                    steps=options.steps,
                    seed=plan.seed,
                    max_blocks=options.blocks,
                    max_findings=plan.per_run,
                    on_example=ticker(f"pool/{level_name}"),
                    min_valid=plan.floor,
                )
            )
        for on, build in plan.request_runs:
            if done.stopped(plan):
                done.not_run.append(f"requests/{on.name}")
                continue
            done.results.append(
                run_requests(
                    build,
                    on,
                    max_examples=options.max_examples,
                    steps=options.steps,
                    seed=plan.seed,
                    max_blocks=plan.request_blocks,
                    max_findings=plan.per_run,
                    on_example=ticker(f"requests/{on.name}"),
                    min_valid=plan.floor,
                )
            )
    return done


def _ticker(progress: Progress, max_examples: int) -> Callable[[str], Callable[[RunRecord], None]]:
    """A progress task per run, advanced after every test case."""

    def ticker(label: str) -> Callable[[RunRecord], None]:
        task = progress.add_task(f"{label:<20}", total=max_examples, examples=0, steps=0)

        def tick(record: RunRecord) -> None:
            progress.update(
                task,
                completed=min(record.examples, max_examples),
                examples=record.examples,
                steps=record.steps,
            )

        return tick

    return ticker
