"""``kvpool conform --machine engine``: an engine through its own scheduler, on one seed;
and the replay of the traces it writes.

The engine is named as every target is: an engine's registry name (its entry's
``load_driver``) or ``module:factory`` building an :class:`~.driver.EngineDriver` from an
:class:`~.driver.EngineSetup`.
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from kvpool.spec.manager import PROPERTIES
from rich.console import Console
from rich.table import Table

from ...hooks import engine_factory_problems
from ...report import print_unmet, results_table
from ...targets.description import Form, TargetDescription
from ...targets.errors import TargetLoadError
from ...targets.factory_entry import import_attribute
from ...targets.registry import engine
from ...usage import EXIT_FINDING, EXIT_TOO_FEW, fail_usage
from ..pool.expectations import Expectation, Expectations, ExpectationsError, read_expectations
from ..pool.runner import LevelResult
from .driver import EngineDriverFactory, EngineSetup, close
from .driver_check import driver_problems
from .runner import run_engine
from .trace_file import (
    EngineTrace,
    EngineTraceError,
    read_engine_trace,
    replay_engine_trace,
    write_engine_pytest,
    write_engine_trace,
)

#: Properties that can only fail on what a capability lets the machine draw: without it,
#: their evaluations judged nothing, and the table says not checked.
NEEDS = {
    "keys-partitioned": ("salts", "the engine takes no cache salt"),
    "events-parent-chain": ("event_parents", "the engine does not show its cache's chain"),
}
#: The events level's stream properties, judged for a driver publishing KV events (the
#: chain where it shows its cache's, ``event_parents``).
EVENT_PROPERTIES = ("events-parent-known", "events-removed-known", "events-parent-chain")


#: ``kvpool conform`` options the engine machine does not take (given, they are refused
#: rather than silently ignored).
NOT_AT_THE_ENGINE_MACHINE = ("profile", "levels", "manager", "check_contracts")
#: The level name an expectations entry's ``level`` may give to match here only.
ENGINE_LEVEL = "scheduler"


def given(parameter: str) -> bool:
    """Whether the running command's ``parameter`` was given on the command line."""
    context = click.get_current_context(silent=True)
    if context is None or parameter not in context.params:
        return False
    return context.get_parameter_source(parameter) is not ParameterSource.DEFAULT


def load_driver(target: TargetDescription) -> tuple[EngineDriverFactory, str]:
    """The driver factory ``target`` names, and how tables name it."""
    if target.form is Form.FACTORY:
        factory: EngineDriverFactory = import_attribute(target.factory or target.text)
        return factory, target.text
    entry: Any = engine(target.engine)
    loader = getattr(entry, "load_driver", None)
    if loader is None:
        raise TargetLoadError(
            f"{target.text} has no engine driver yet: the engine machine drives engines "
            "whose entry has load_driver (or a module:factory building an EngineDriver)"
        )
    found: tuple[EngineDriverFactory, str] = loader(target)
    return found


def probe(console: Console, factory: EngineDriverFactory, name: str) -> frozenset[str]:
    """Build one engine and check it offers what it declares; its capabilities."""
    wrong = engine_factory_problems(factory)
    if wrong:
        fail_usage(console, f"engine {name!r}: " + "; ".join(wrong))
    try:
        driver = factory(EngineSetup(8, 2))
    except Exception as exc:  # the user's factory failed to build an engine
        fail_usage(console, f"engine {name!r} could not be built: {type(exc).__name__}: {exc}")
    problems = driver_problems(driver)
    if problems:
        fail_usage(console, f"engine {name!r} is not an engine driver: " + "; ".join(problems))
    capabilities = frozenset(driver.capabilities)
    close(driver)
    return capabilities


def conform_engine(
    console: Console,
    target: TargetDescription,
    *,
    seed: int | None,
    max_examples: int,
    steps: int,
    blocks: int,
    max_findings: int,
    min_valid: float,
    trace_dir: str,
    consumer: str | None,
    expect_file: Path | None = None,
) -> None:
    """Run the engine machine on ``target`` and exit as ``kvpool conform`` does (0 passed,
    1 a finding, 2 a usage error, 3 too few valid test cases).

    With ``expect_file`` (``--expect``, as at every machine) a finding an entry matches is
    reported as known, not as a finding; one that no run meets, and every finding no
    entry matches, fail the run. There is no spec state to adopt here, so a known finding
    ends its test case, and the search looks for one more distinct finding per entry."""
    not_here = [f"--{name.replace('_', '-')}" for name in NOT_AT_THE_ENGINE_MACHINE if given(name)]
    if not_here:
        fail_usage(
            console,
            f"{', '.join(not_here)}: not taken by the engine machine (it judges an engine by "
            "the request-level properties alone, with no profile, level or manager)",
        )
    try:
        factory, name = load_driver(target)
    except (TargetLoadError, click.BadParameter) as exc:
        fail_usage(console, str(exc))
    expected = read_expected(console, expect_file)
    capabilities = probe(console, factory, name)
    judged = consumer or ("count" if "events" in capabilities else None)
    if consumer is not None and "events" not in capabilities:
        fail_usage(console, f"engine {name!r} publishes no KV events: leave --consumer out")
    run_seed = seed if seed is not None else random.randrange(2**32)
    console.print(
        f"kvpool conform: engine [bold]{name}[/bold], machine engine, seed {run_seed}; it "
        f"offers {', '.join(sorted(capabilities)) or 'submit, step and report only'}"
        + (f"; its KV events judged by the {judged} consumer" if judged else ""),
        highlight=False,
        soft_wrap=True,
    )
    result = run_engine(
        factory,
        max_examples=max_examples,
        steps=steps,
        seed=run_seed,
        max_blocks=blocks,
        consumer=judged,
        max_findings=max_findings + (len(expected.entries) if expected else 0),
        min_valid=math.ceil(min_valid * max_examples),
    )
    unmet: list[Expectation] = []
    if expected is not None:
        result, unmet = known_findings(console, result, expected)
    console.print(results_table(name, "none (judged by the properties)", [result]))
    console.print(properties_table(result, capabilities))
    for number, failure in enumerate(result.failures, 1):
        print_finding(console, result, number)
        trace = EngineTrace(
            target.text, failure.config, failure.trace, failure.message, run_seed, judged
        )
        path = write_engine_trace(trace, Path(trace_dir), number)
        test = write_engine_pytest(path, trace, target.text)
        console.print(f"\n  Trace written to {path}", highlight=False, soft_wrap=True)
        console.print(f"  pytest file:     {test}", highlight=False, soft_wrap=True)
        console.print(
            f"  Replay it with:  kvpool replay {path} --target {target.text}",
            highlight=False,
            soft_wrap=True,
        )
    if result.too_few_valid is not None:
        console.print(f"\n[bold red]Too few valid test cases: {result.label}[/bold red]")
        console.print(f"  {result.too_few_valid}", markup=False, highlight=False)
    if result.failures:
        console.print(
            f"\nReproduce with: kvpool conform --target {target.text} --machine engine "
            f"--seed {run_seed} --max-examples {max_examples} --steps {steps} "
            f"--blocks {blocks}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_FINDING)
    if unmet:
        sys.exit(EXIT_FINDING)
    if not result.passed:
        sys.exit(EXIT_TOO_FEW)
    console.print("[green]every run passed[/green]")


def read_expected(console: Console, path: Path | None) -> Expectations | None:
    """The expectations ``--expect`` names (exit 2 naming what is wrong in the file)."""
    if path is None:
        return None
    try:
        return read_expectations(path)
    except ExpectationsError as exc:
        fail_usage(console, str(exc))


def known_findings(
    console: Console, result: LevelResult, expected: Expectations
) -> tuple[LevelResult, list[Expectation]]:
    """``result`` without the findings ``expected`` knows (each printed as known, with its
    situation and link), and the entries no finding met (each printed)."""
    left = []
    for failure in result.failures:
        entry = expected.match(failure.message, ENGINE_LEVEL)
        if entry is None:
            left.append(failure)
            continue
        console.print(
            f"\nknown finding ({entry.rule}): {entry.situation} ({entry.upstream})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        console.print(f"  {failure.message}", markup=False, highlight=False, soft_wrap=True)
    unmet = expected.unmet({ENGINE_LEVEL})
    print_unmet(console, expected, unmet)
    return replace(result, failures=tuple(left)), unmet


def properties_table(result: LevelResult, capabilities: frozenset[str]) -> Table:
    """Each property with how often it was evaluated, or ``not checked`` (never passed)
    where the engine showed nothing it could be judged on."""
    table = Table(title="properties judged on what the engine shows (evaluations)")
    table.add_column("property")
    table.add_column(result.label, justify="right")
    names = list(PROPERTIES) + (list(EVENT_PROPERTIES) if "events" in capabilities else [])
    for name in names:
        count = result.record.properties[name]
        needs = NEEDS.get(name)
        if needs is not None and needs[0] not in capabilities:
            table.add_row(name, f"[yellow]not checked ({needs[1]})[/yellow]")
            continue
        table.add_row(name, str(count) if count else "[yellow]not checked[/yellow]")
    return table


def print_finding(console: Console, result: LevelResult, number: int) -> None:
    """One finding: the broken property, the engine setup and the shrunk actions."""
    failure = result.failures[number - 1]
    console.print(f"\n[bold red]Nonconformance: {result.label}[/bold red]")
    console.print(f"  {failure.message}", markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"\n  Shrunk client/model sequence ({len(failure.trace)} actions) on an engine "
        f"built as {failure.config}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for i, action in enumerate(failure.trace, 1):
        marker = "  <- fails here" if i == len(failure.trace) else ""
        console.print(
            f"    {i:>3}. {action_text(action)}{marker}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def replay_engine_file(console: Console, trace_path: Path, target: str | None) -> None:
    """``kvpool replay`` of an engine trace on the engine ``target`` names (a trace names
    its engine as text only, never loaded from the file): exit 1 while the engine still
    fails, 0 once it passes, 2 for an unusable file or target."""
    from ...targets.registry import describe_target

    try:
        trace = read_engine_trace(trace_path)
        if target is None:
            raise EngineTraceError(
                f"{trace_path} is an engine trace of {trace.target}: name the engine that "
                f"replays it (a trace file never chooses code to run); run: kvpool replay "
                f"{trace_path} --target {trace.target}"
            )
        factory, _ = load_driver(describe_target(target))
    except (EngineTraceError, TargetLoadError, click.BadParameter) as exc:
        fail_usage(console, str(exc))
    console.print(
        f"kvpool replay: {trace_path} on {target} (engine/scheduler), {len(trace.actions)} actions",
        highlight=False,
        markup=False,
    )
    found = replay_engine_trace(trace, factory)
    if found is None:
        console.print("the engine passes this trace now", style="green", highlight=False)
        return
    console.print(found, style="red", markup=False, highlight=False, soft_wrap=True)
    sys.exit(EXIT_FINDING)


def show_engine_file(console: Console, trace_path: Path) -> None:
    """``kvpool show`` of an engine trace: the engine, its setup, the client/model actions
    and what the engine did wrong, as recorded (nothing is run)."""
    try:
        trace = read_engine_trace(trace_path)
    except EngineTraceError as exc:
        fail_usage(console, str(exc))
    for line in engine_trace_lines(trace):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def engine_trace_lines(trace: EngineTrace) -> list[str]:
    """An engine trace as text: header, numbered actions (the last marked), finding."""
    lines = [
        f"engine trace of {trace.target} (machine engine, seed {trace.seed}"
        + (f", {trace.consumer} consumer" if trace.consumer else "")
        + ")",
        f"engine built as {trace.setup}",
    ]
    for i, action in enumerate(trace.actions, 1):
        marker = "  <- fails here" if i == len(trace.actions) else ""
        lines.append(f"  {i:>3}. {action_text(action)}{marker}")
    return [*lines, trace.message]


def action_text(action: Any) -> str:
    """One client or model action as a call: ``arrive(request_id='r1', ...)``."""
    args = ", ".join(f"{k}={v!r}" for k, v in vars(action).items() if k != "operation")
    return f"{action.operation}({args})"


@click.command()
@click.argument("trace_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", "-t", required=True, help="The engine that replays the trace.")
def replay(trace_path: Path, target: str) -> None:
    """Replay an engine trace: exit 1 while the engine still fails, 0 once it passes."""
    replay_engine_file(Console(), trace_path, target)


if __name__ == "__main__":  # python -m kvpool.conformance.machines.engine.command TRACE
    replay()
