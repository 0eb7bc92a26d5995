"""``kvpool conform``: the lockstep suite on a target, level by level, and the
traces of what it found."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click
from click.core import ParameterSource
from kvpool.spec import PROFILES, PoolConfig, get_profile
from kvpool.spec.manager import ManagerConfig
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .consumers.naming import BUILT_IN as CONSUMERS
from .consumers.naming import parse_consumer
from .consumers.protocol import ConsumerError
from .engine.contracts import checking_contracts
from .engine.expectations import ExpectationsError, read_expectations
from .engine.levels import LEVELS, MACHINES, REQUEST_MIN_BLOCKS, Level, level_for
from .engine.lockstep import RunRecord
from .engine.runner import LevelResult, run_level
from .engine.surface import SurfaceMismatch, surface_message, surface_problems
from .hooks import manager_target_problems
from .manager.machine import RunBuilder
from .manager.runner import (
    ON_MANAGER,
    ON_POOL,
    events_on_manager,
    events_on_pool,
    manager_builder,
    pool_builder,
    run_requests,
)
from .manager.target import RequestSetup
from .report import (
    coverage_tables,
    expected_table,
    print_expected,
    print_failure,
    print_repeat,
    properties_table,
    results_table,
)
from .targets.description import TargetDescription
from .targets.loading import (
    TargetLoadError,
    choose_profile,
    entry_of,
    load_manager,
    load_target,
)
from .targets.options import MANAGER, TARGET, package_option
from .targets.registry import describe_target
from .usage import EXIT_FINDING, EXIT_TOO_FEW, comma_names, fail_usage


@click.command()
@package_option
@click.option(
    "--target",
    "-t",
    default="impl",
    show_default=True,
    type=TARGET,
    help="The pool to check: 'impl' (ours), 'spec' (self-check), an engine's NAME, "
    "NAME==VERSION or NAME@PATH (kvpool targets lists them: vllm==0.33.0, lmdeploy, ...), "
    "or 'module:factory' — a factory building a pool with vLLM's BlockPool API "
    "(called with num_gpu_blocks=, enable_caching=, hash_block_size=, "
    "enable_kv_cache_events=) or a Target from (config, profile).",
)
@click.option(
    "--profile",
    "-p",
    default=None,
    help="Which pool behaviour is expected (default: the target's own profile, e.g. "
    "vllm-0.33 for vllm==0.33.0, else seed). Known: " + ", ".join(PROFILES) + ".",
)
@click.option(
    "--level",
    "-l",
    "levels",
    default=None,
    help="Comma-separated levels: safety (set semantics, any eviction order), order "
    "(the profile's exact eviction order), robustness (out-of-contract input "
    "refused, pool unchanged), events (the target's KV events fed to a consumer model "
    "after every step; see --consumer; named here, it also judges the request machine's "
    "pool calls). [default: safety,order,robustness, and events on the pool machine when "
    "the target publishes KV events]",
)
@click.option(
    "--consumer",
    default=None,
    metavar="NAME",
    help="Who the events level judges the stream by: count (residency counted per medium, "
    "group and hash; every copy stored and removed: vLLM's documented contract), set (the "
    "hashes present per group), dynamo (NVIDIA Dynamo's radix-tree index in process, the "
    "extra [dynamo]: asked after every step about every prefix the pool serves; "
    "router-recall and router-precision), or a plugin module:factory (see the contract "
    "page). Built in: " + ", ".join(CONSUMERS) + ". [default: the one the profile's release "
    "promises; count where it promises none]",
)
@click.option(
    "--machine",
    "-m",
    "machines",
    default="pool,requests",
    show_default=True,
    help="Comma-separated machines: pool (pool actions at each --level), requests "
    "(request actions: the spec's manager driving the target pool, and the target's own "
    "manager, if any, against the spec's manager; request-level properties checked).",
)
@click.option(
    "--manager",
    default="auto",
    show_default=True,
    type=MANAGER,
    help="The KV cache manager for the requests machine: 'auto' (the target's own, e.g. "
    "impl's KVCacheManager, or an LMDeploy release's block manager with its prefix trie), "
    "'none', 'vllm' (the KVCacheManager of the vLLM release --target names), 'lmdeploy' "
    "(the same for an LMDeploy release), or 'module:factory' building a manager target from "
    "(setup, profile).",
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
    "--max-findings",
    default=10,
    show_default=True,
    type=click.IntRange(1, 50),
    help="Distinct findings to collect per run before stopping (each shrunk, each with its "
    "trace); 1 ends the whole command at its first finding, as --fail-fast does.",
)
@click.option(
    "--fail-fast",
    is_flag=True,
    default=False,
    help="End the command at its first finding: that run stops there (its finding still "
    "shrunk and its trace written) and the levels and machines after it do not run.",
)
@click.option(
    "--min-valid",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="Fewest valid test cases a run's last search must run, as a fraction of "
    "--max-examples; a run under it fails (exit 3). Test cases that run into a finding "
    "already reported are dropped, and Hypothesis only gives up once fewer than 1% of its "
    "test cases are valid: a search under half of what was asked was sized by its "
    "rejections, not by --max-examples.",
)
@click.option(
    "--trace-dir",
    default="kvpool-traces",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where a failure's trace (ITF JSON) and its pytest file are written.",
)
@click.option(
    "--coverage/--no-coverage",
    default=True,
    show_default=True,
    help="Print which actions and situations the run reached.",
)
@click.option(
    "--expect",
    "expect_file",
    default=None,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The target's known findings (TOML or JSON: each with its rule, situation and "
    "upstream link; see docs/guide/expectations.md). A known finding is reported as "
    "expected and the run goes on past it; one that no longer shows up, and every new "
    "one, fail the run.",
)
@click.option(
    "--check-contracts",
    is_flag=True,
    help="Debug the spec itself: on every step, check the pre: and post: lines of the "
    "transition it takes (PEP 316 docstring contracts) on the run's real states. A "
    "condition that fails is a bug of the spec, reported with the transition, the "
    "condition and the action; the run is slower.",
)
def conform(
    target: TargetDescription,
    profile: str | None,
    levels: str | None,
    consumer: str | None,
    machines: str,
    manager: TargetDescription | str,
    max_examples: int,
    steps: int,
    seed: int | None,
    blocks: int,
    max_findings: int,
    fail_fast: bool,
    min_valid: float,
    trace_dir: str,
    coverage: bool,
    expect_file: Path | None,
    check_contracts: bool,
) -> None:
    """Run the lockstep conformance suite: the spec and TARGET, step by step.

    Every action is applied to both; results, reuse-watcher firings, events, and whatever
    the target shows of its state (free queue, ref counts, keys, free-list links) must
    agree. A difference is shrunk to a minimal action sequence and printed. The result
    table gives each run's valid test cases, those rejected (they ran into a finding
    already reported) and draws skipped (outside the contract), and its steps per second.

    Exit status: 0 every level passed, 1 a nonconformance, 2 a usage or loading error (also
    a target lacking a method, field or signature the chosen levels call: checked before
    any test case, all listed in one message), 3 a run with fewer valid test cases than
    --min-valid (and no nonconformance), 4 a bug in kvpool (with its traceback).
    """
    console = Console()
    if not console.is_terminal:  # a log or a pipe: room for every column of the table
        console.width = max(console.width, 110)
    try:
        level_names = comma_names(levels or "safety,order,robustness", LEVELS, "level")
        machine_names = comma_names(machines, MACHINES, "machine")
        target, machine_names, alone = _manager_alone(target, manager, machine_names)
        default = choose_profile(target)
        chosen_profile = get_profile(profile or default.name)
        manager_text = manager if isinstance(manager, str) else manager.text
        manager_only = not entry_of(target).has_pool  # nano-vllm: a manager, no pool API
        if manager_only:
            machine_names = _manager_only_machines(
                console, target.text, machine_names, manager_text
            )
        else:
            factory, name = load_target(target)
        manager_factory, manager_name = load_manager(manager, target)
        if manager_only:
            factory, name = load_target("spec")[0], getattr(manager_factory, "name", target.text)
    except (click.BadParameter, KeyError, TargetLoadError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        fail_usage(console, message)
    expected = None
    if expect_file is not None:
        try:
            expected = read_expectations(expect_file)
        except ExpectationsError as exc:
            fail_usage(console, str(exc))
    problems = surface_problems(factory, chosen_profile, PoolConfig(4))
    if problems:
        fail_usage(console, surface_message(name, problems))
    try:
        probe = factory(PoolConfig(2), chosen_profile)
    except Exception as exc:  # the user's factory failed to build a pool
        fail_usage(console, f"target {name!r} could not build a pool: {type(exc).__name__}: {exc}")
    emits = "take_events" in probe.operations and chosen_profile.offers("take_events")
    if levels is None and emits:
        level_names.append("events")
    # a manager-only target publishes (or not) its own events: judged on its manager run
    if "events" in level_names and not emits and not manager_only:
        fail_usage(
            console,
            f"target {name!r} publishes no KV events (its pool has no take_events), so the "
            "events level cannot run; leave it out of --level",
        )
    if consumer is not None and "events" not in level_names:
        fail_usage(console, "--consumer judges the events level, which this run leaves out")
    if consumer is not None:
        try:
            parse_consumer(consumer)
        except ConsumerError as exc:
            fail_usage(console, str(exc))
    consumer_model = consumer or chosen_profile.consumer_contract or "count"
    if manager_factory is not None:
        events_asked = manager_only and levels is not None and "events" in level_names
        setup = RequestSetup(ManagerConfig(1), PoolConfig(2, enable_kv_cache_events=events_asked))
        try:
            built = manager_factory(setup, chosen_profile)
        except Exception as exc:  # the user's factory failed to build a manager
            fail_usage(
                console,
                f"manager {manager_name!r} could not be built: {type(exc).__name__}: {exc}",
            )
        hook_problems = manager_target_problems(built)
        if hook_problems:
            fail_usage(console, f"manager {manager_name!r}: " + "; ".join(hook_problems))
        if events_asked and not callable(getattr(built, "take_events", None)):
            fail_usage(
                console,
                f"manager {manager_name!r} publishes no KV events, so the events level cannot "
                "run; leave it out of --level",
            )
    run_seed = seed if seed is not None else random.randrange(2**32)
    console.print(
        f"kvpool conform: target [bold]{name}[/bold], profile {chosen_profile.name}"
        f"{'' if profile else f' ({escape(default.reason)})'}, "
        f"machines {', '.join(machine_names)}, manager {manager_name}, seed {run_seed}",
        highlight=False,
        soft_wrap=True,  # the profile's reason is one line a reader (or grep) can find
    )
    if alone:
        console.print(
            f"no --target: the requests machine checks manager {manager_name}; its "
            "requests/pool run drives the spec's own pool (the spec's manager on the spec's "
            "pool), and the pool machine is not run",
            highlight=False,
            markup=False,
        )
    if "events" in level_names:
        promised = chosen_profile.consumer_contract
        console.print(
            f"events judged by the {consumer_model} consumer; profile {chosen_profile.name} "
            f"promises {promised or 'no consumer contract'}",
            highlight=False,
        )
    request_runs: list[tuple[Level, RunBuilder]] = []
    if "requests" in machine_names:
        if not manager_only:
            request_runs.append((ON_POOL, pool_builder(factory, chosen_profile)))
            if levels is not None and "events" in level_names:
                # asked for: the spec's manager's pool calls judged by the consumer too (not
                # in a default run, which judges the stream on the pool machine only)
                judged = pool_builder(factory, chosen_profile, consumer_model)
                request_runs.append((events_on_pool(consumer_model), judged))
        if manager_factory is not None and not (manager_only and level_names == ["events"]):
            request_runs.append((ON_MANAGER, manager_builder(manager_factory, chosen_profile)))
        if manager_only and levels is not None and "events" in level_names:
            # a manager that publishes its own events (SGLang's tree): its stream judged
            judged = manager_builder(manager_factory, chosen_profile, consumer_model)
            request_runs.append((events_on_manager(consumer_model), judged))
    fail_fast = fail_fast or max_findings == 1
    per_run = 1 if fail_fast else max_findings
    floor = math.ceil(min_valid * max_examples)
    results: list[LevelResult] = []
    not_run: list[str] = []

    def stopped(done: list[LevelResult]) -> bool:
        return fail_fast and any(r.failures for r in done)

    try:
        with (
            checking_contracts(check_contracts),
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[examples]} examples, {task.fields[steps]} steps"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            ) as progress,
        ):

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

            pool_levels = level_names if "pool" in machine_names else []
            for level_name in pool_levels:
                if stopped(results):
                    not_run.append(f"pool/{level_name}")
                    continue
                results.append(
                    run_level(
                        factory,
                        chosen_profile,
                        replace(level_for(level_name, consumer_model), expected=expected),
                        max_examples=max_examples,
                        steps=steps,
                        seed=run_seed,
                        max_blocks=blocks,
                        max_findings=per_run,
                        on_example=ticker(f"pool/{level_name}"),
                        min_valid=floor,
                    )
                )
            for on, build in request_runs:
                if stopped(results):
                    not_run.append(f"requests/{on.name}")
                    continue
                results.append(
                    run_requests(
                        build,
                        on,
                        max_examples=max_examples,
                        steps=steps,
                        seed=run_seed,
                        max_blocks=max(REQUEST_MIN_BLOCKS, blocks),
                        max_findings=per_run,
                        on_example=ticker(f"requests/{on.name}"),
                        min_valid=floor,
                    )
                )
    except SurfaceMismatch as exc:  # a call the surface check could not foresee
        fail_usage(
            console,
            f"target {name!r} does not take a call the suite makes (this is not a finding): {exc}",
        )
    console.print(results_table(name, chosen_profile.name, results))
    if not_run:
        console.print(
            f"stopped at the first finding (--fail-fast); not run: {', '.join(not_run)}",
            highlight=False,
        )
    if coverage:
        for table in coverage_tables(results):
            console.print(table)
    checked = properties_table(results)
    if checked is not None:
        console.print(checked)
    unmet = []
    if expected is not None:
        console.print(expected_table(expected, results))
        print_expected(console, expected)
        unmet = expected.unmet({r.level.name for r in results if r.machine == "pool"})
        for entry in unmet:
            console.print(
                f"\n[bold red]A known finding no longer shows up: {entry.rule}[/bold red]",
                highlight=False,
            )
            console.print(
                f"  {entry.situation} ({entry.upstream}): remove it from {expected.source} "
                "if it was fixed",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    failed = [r for r in results if r.failures]
    if failed:  # the trace writer is imported only when there is a trace to write
        from .trace.model import Trace, TraceMeta
        from .trace.save import kvpool_version, save_trace
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
                target=target.text,
                profile=chosen_profile.name,
                machine=result.machine,
                level=result.level.name,
                consumer=result.level.consumer,
                config=failure.config,
                seed=run_seed,
                manager=manager_name if result.machine == "requests" else None,
                target_version=getattr(probe, "version", None),
                kvpool_version=kvpool_version(),
                message=failure.message,
            )
            save_trace(console, Trace(meta, failure.trace), Path(trace_dir), number)
    for result in results:
        if result.too_few_valid is not None:
            console.print(f"\n[bold red]Too few valid test cases: {result.label}[/bold red]")
            console.print(
                f"  {result.too_few_valid}", markup=False, highlight=False, soft_wrap=True
            )
    if failed:
        first = failed[0]
        which = (
            f"--machine pool --level {first.level.name}"
            if first.machine == "pool"
            else f"--machine requests --manager {manager_text}"
        )
        if first.level.consumer is not None:
            events = " --level events" if first.machine == "requests" else ""
            which += f"{events} --consumer {first.level.consumer}"
        if fail_fast:  # the same passes, in the same order
            which += " --fail-fast"
        console.print(
            f"\nReproduce with: kvpool conform {'' if alone else f'--target {target.text} '}"
            f"--profile {chosen_profile.name} "
            f"{which} --seed {run_seed} "
            f"--max-examples {max_examples} --steps {steps} --blocks {blocks}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_FINDING)
    if unmet:
        sys.exit(EXIT_FINDING)
    if any(not r.passed for r in results):
        sys.exit(EXIT_TOO_FEW)
    console.print("[green]every run passed[/green]")


DEFAULT = ParameterSource.DEFAULT


def _manager_alone(
    target: TargetDescription, manager: TargetDescription | str, machines: list[str]
) -> tuple[TargetDescription, list[str], bool]:
    """``--manager`` naming a manager without ``--target``: the requests machine checks that
    manager, its ``requests/pool`` run on the spec's own pool (no pool was named). Returns
    the target, the machines and whether this is such a run."""
    context = click.get_current_context()
    if isinstance(manager, str) or context.get_parameter_source("target") is not DEFAULT:
        return target, machines, False
    if context.get_parameter_source("machines") is not DEFAULT and "pool" in machines:
        raise click.BadParameter("the pool machine checks a pool: name it with --target")
    return describe_target("spec"), ["requests"], True


def _manager_only_machines(
    console: Console, target: str, machines: list[str], manager: str
) -> list[str]:
    """A manager-only target (nano-vllm's) runs the requests machine's manager run only."""
    if manager not in ("auto", target):
        raise click.BadParameter(f"{target} is itself the manager: leave --manager out")
    if "requests" not in machines:
        raise click.BadParameter(
            f"{target} is a KV cache manager with no pool API of its own: use --machine requests"
        )
    if "pool" in machines:
        console.print(f"{target} has no pool API of its own: the pool machine is not run")
    return ["requests"]
