"""Reporting a conform run: the header before it, and after it the result, coverage and
property tables, the known findings, each new finding (printed once, its trace written),
the runs with too few valid test cases, the command that reproduces the first finding,
and the exit status of :mod:`.exits`' policy."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ...engines.vllm_api.features import inferred_lines
from ...exits import EXIT_FINDING, EXIT_PASS, EXIT_TOO_FEW
from ...machines.pool.expectations import Expectation
from ...machines.pool.runner import LevelResult
from ...report import (
    coverage_tables,
    expected_table,
    print_expected,
    print_failure,
    print_repeat,
    print_unmet,
    properties_table,
    results_table,
)
from .plan import Plan
from .run import Execution


def print_header(console: Console, plan: Plan) -> None:
    """What is checked, against which profile (and why), by which machines, on what seed."""
    reason = f" ({escape(plan.profile_reason)})" if plan.profile_reason is not None else ""
    console.print(
        f"kvpool conform: target [bold]{plan.name}[/bold], profile {plan.profile.name}"
        f"{reason}, machines {', '.join(plan.machine_names)}, manager {plan.manager_name}, "
        f"seed {plan.seed}",
        highlight=False,
        soft_wrap=True,  # the profile's reason is one line a reader (or grep) can find
    )
    for line in inferred_lines(plan.probe, engine=plan.target.engine):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if plan.alone:
        console.print(
            f"no --target: the requests machine checks manager {plan.manager_name}; its "
            "requests/pool run drives the spec's own pool (the spec's manager on the spec's "
            "pool), and the pool machine is not run",
            highlight=False,
            markup=False,
        )
    if "events" in plan.level_names:
        promised = plan.profile.consumer_contract
        console.print(
            f"events judged by the {plan.consumer_model} consumer; profile {plan.profile.name} "
            f"promises {promised or 'no consumer contract'}",
            highlight=False,
        )


def report(console: Console, plan: Plan, done: Execution) -> int:
    """Everything after the runs, printed; the exit status."""
    results = done.results
    console.print(results_table(plan.name, plan.profile.name, results))
    if done.not_run:
        console.print(
            f"stopped at the first finding (--fail-fast); not run: {', '.join(done.not_run)}",
            highlight=False,
        )
    if plan.options.coverage:
        for table in coverage_tables(results):
            console.print(table)
    checked = properties_table(results)
    if checked is not None:
        console.print(checked)
    unmet = _print_known(console, plan, results)
    failed = [r for r in results if r.failures]
    _print_findings(console, plan, failed)
    for result in results:
        if result.too_few_valid is not None:
            console.print(f"\n[bold red]Too few valid test cases: {result.label}[/bold red]")
            console.print(
                f"  {result.too_few_valid}", markup=False, highlight=False, soft_wrap=True
            )
    if failed:
        console.print(reproduce_line(plan, failed[0]), highlight=False, soft_wrap=True)
        return EXIT_FINDING
    if unmet:
        return EXIT_FINDING
    if any(not r.passed for r in results):
        return EXIT_TOO_FEW
    console.print("[green]every run passed[/green]")
    return EXIT_PASS


def _print_known(console: Console, plan: Plan, results: list[LevelResult]) -> list[Expectation]:
    """The known findings met and missed (``--expect``); the ones no run met."""
    expected = plan.expected
    if expected is None:
        return []
    console.print(expected_table(expected, results))
    print_expected(console, expected)
    unmet = expected.unmet({r.level.name for r in results if r.machine == "pool"})
    print_unmet(console, expected, unmet)
    return unmet


def _print_findings(console: Console, plan: Plan, failed: list[LevelResult]) -> None:
    """Each finding, once (an identical message from a later run points back to the
    first), with its trace written to ``--trace-dir``."""
    if failed:  # the trace writer is imported only when there is a trace to write
        from ...trace.model import Trace, TraceMeta
        from ...trace.save import kvpool_version, save_trace
    first_seen: dict[str, str] = {}  # a finding's message -> the run that reported it first
    for result in failed:
        for number, failure in enumerate(result.failures, 1):
            if failure.message in first_seen:  # identical findings are reported once
                print_repeat(console, result, number, first_seen[failure.message])
                continue
            first_seen[failure.message] = result.label
            print_failure(console, result, failure, number)
            if failure.config is None:
                continue
            meta = TraceMeta(
                target=plan.target.text,
                profile=plan.profile.name,
                machine=result.machine,
                level=result.level.name,
                consumer=result.level.consumer,
                config=failure.config,
                seed=plan.seed,
                manager=plan.manager_name if result.machine == "requests" else None,
                target_version=getattr(plan.probe, "version", None),
                kvpool_version=kvpool_version(),
                message=failure.message,
            )
            save_trace(console, Trace(meta, failure.trace), Path(plan.options.trace_dir), number)


def reproduce_line(plan: Plan, first: LevelResult) -> str:
    """The command that runs ``first``'s finding again, alone."""
    options = plan.options
    which = (
        f"--machine pool --level {first.level.name}"
        if first.machine == "pool"
        else f"--machine requests --manager {plan.manager_text}"
    )
    if first.level.consumer is not None:
        events = " --level events" if first.machine == "requests" else ""
        which += f"{events} --consumer {first.level.consumer}"
    if plan.fail_fast:  # the same passes, in the same order
        which += " --fail-fast"
    return (
        f"\nReproduce with: kvpool conform {'' if plan.alone else f'--target {plan.target.text} '}"
        f"--profile {plan.profile.name} "
        f"{which} --seed {plan.seed} "
        f"--max-examples {options.max_examples} --steps {options.steps} --blocks {options.blocks}"
    )
