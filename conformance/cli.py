"""The ``kvpool`` command."""

from __future__ import annotations

import importlib
import math
import random
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NoReturn

import click
from kvpool.spec import CONSUMER_MODELS, PROFILES, PoolConfig, get_profile
from kvpool.spec.manager import KVGroup, ManagerConfig
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .engine.contracts import checking_contracts
from .engine.levels import LEVELS, MACHINES, REQUEST_MIN_BLOCKS, Level, level_for
from .engine.lockstep import Nonconformance, RunRecord
from .engine.quick_pass import hunt_level
from .engine.runner import LevelResult, run_level
from .engine.target import EVICT_FIRST
from .manager.machine import RequestRun, RunBuilder
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
from .manager.workload import Workload, WorkloadParams, WorkloadStats
from .report import action_line, coverage_tables, print_failure, properties_table, results_table
from .targets.engines import is_manager_target
from .targets.loading import (
    BUILT_IN,
    BUILT_IN_MANAGERS,
    VLLM_SPECS,
    TargetLoadError,
    default_profile,
    load_manager,
    load_target,
)

EXIT_PASS, EXIT_NONCONFORMANCE, EXIT_USAGE, EXIT_TOO_FEW_VALID = 0, 1, 2, 3


#: The commands imported only when they are run or listed, so that ``kvpool conform``
#: starts without loading what the others need: name -> "module:attribute".
LAZY_COMMANDS = {
    "mutants": ".mutants.command:mutants",
    "prove": ".proofs.command:prove",
    "crosshair": ".crosshair_check:crosshair",
    "bench": ".bench.command:bench",
    "diff": ".diff.command:diff",
    "docs": ".reference.command:docs",
    "fuzz": ".fuzz.command:fuzz",
    "publish": ".stream.publish_command:publish",
    "monitor": ".stream.monitor_command:monitor",
}


class LazyGroup(click.Group):
    """A command group that imports the commands of :data:`LAZY_COMMANDS` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in LAZY_COMMANDS:
            return super().get_command(ctx, cmd_name)
        module, _, attribute = LAZY_COMMANDS[cmd_name].partition(":")
        command = getattr(importlib.import_module(module, __package__), attribute)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """kvpool: the reference spec and conformance suite for paged KV-cache block pools.

    \b
    Start here:
      kvpool conform                         check the built-in pool at every level
      kvpool conform --target mypkg.pool:make_pool
                                             check your own vLLM-style pool
      kvpool targets                         what can be checked, and the profiles
    """


def fail_usage(console: Console, message: str) -> NoReturn:
    """Print ``message`` as an error, unwrapped and unformatted, and exit 2."""
    console.print("[red]error:[/red] ", end="")
    console.print(message, markup=False, highlight=False, soft_wrap=True)
    sys.exit(EXIT_USAGE)


def _choices(value: str, known: Iterable[str], what: str) -> list[str]:
    """A comma-separated list of names, each one of ``known``."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown {what}(s) {', '.join(unknown) or value!r}; choose from {', '.join(known)}"
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
    type=click.Choice(CONSUMER_MODELS),
    default=None,
    help="The consumer model the events level judges the stream by: count (residency "
    "counted per medium, group and hash; every copy stored and removed: vLLM's documented "
    "contract) or set (the hashes present per group, as some routers keep them). "
    "[default: the one the profile's release promises; count where it promises none]",
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
    "shrunk and its trace written) and the levels and machines after it do not run. A "
    "quick pass over the pool levels runs first, drawn by a seeded random.Random instead "
    "of Hypothesis (about ten times the steps a second; the same seed, the same finding).",
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
    "--check-contracts",
    is_flag=True,
    help="Debug the spec itself: on every step, check the pre: and post: lines of the "
    "transition it takes (PEP 316 docstring contracts) on the run's real states. A "
    "condition that fails is a bug of the spec, reported with the transition, the "
    "condition and the action; the run is slower.",
)
def conform(
    target: str,
    profile: str | None,
    levels: str | None,
    consumer: str | None,
    machines: str,
    manager: str,
    max_examples: int,
    steps: int,
    seed: int | None,
    blocks: int,
    max_findings: int,
    fail_fast: bool,
    min_valid: float,
    trace_dir: str,
    coverage: bool,
    check_contracts: bool,
) -> None:
    """Run the lockstep conformance suite: the spec and TARGET, step by step.

    Every action is applied to both; results, reuse-watcher firings, events, and whatever
    the target shows of its state (free queue, ref counts, keys, free-list links) must
    agree. A difference is shrunk to a minimal action sequence and printed. The result
    table gives each run's valid test cases, those rejected (they ran into a finding
    already reported) and draws skipped (outside the contract), and its steps per second.

    Exit status: 0 every level passed, 1 a nonconformance, 2 a usage or loading error,
    3 a run with fewer valid test cases than --min-valid (and no nonconformance).
    """
    console = Console()
    if not console.is_terminal:  # a log or a pipe: room for every column of the table
        console.width = max(console.width, 110)
    try:
        level_names = _choices(levels or "safety,order,robustness", LEVELS, "level")
        machine_names = _choices(machines, MACHINES, "machine")
        chosen_profile = get_profile(profile or default_profile(target) or "seed")
        manager_only = is_manager_target(target)  # nano-vllm: a manager, no pool API
        if manager_only:
            machine_names = _manager_only_machines(console, target, machine_names, manager)
        else:
            factory, name = load_target(target)
        manager_factory, manager_name = load_manager(manager, target)
        if manager_only:
            factory, name = load_target("spec")[0], getattr(manager_factory, "name", target)
    except (click.BadParameter, KeyError, TargetLoadError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        fail_usage(console, message)
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
        if events_asked and not callable(getattr(built, "take_events", None)):
            fail_usage(
                console,
                f"manager {manager_name!r} publishes no KV events, so the events level cannot "
                "run; leave it out of --level",
            )
    run_seed = seed if seed is not None else random.randrange(2**32)
    console.print(
        f"kvpool conform: target [bold]{name}[/bold], profile {chosen_profile.name}, "
        f"machines {', '.join(machine_names)}, manager {manager_name}, seed {run_seed}",
        highlight=False,
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
        for level_name in pool_levels if fail_fast else ():
            # the quick pass first: the seeded-random driver runs ~10x the steps a second
            if stopped(results):
                not_run.append(f"pool/{level_name} (random)")
                continue
            results.append(
                hunt_level(
                    factory,
                    chosen_profile,
                    level_for(level_name, consumer_model),
                    max_examples=max_examples,
                    steps=steps,
                    seed=run_seed,
                    max_blocks=blocks,
                    on_example=ticker(f"pool/{level_name} (random)"),
                )
            )
        for level_name in pool_levels:
            if stopped(results):
                not_run.append(f"pool/{level_name}")
                continue
            results.append(
                run_level(
                    factory,
                    chosen_profile,
                    level_for(level_name, consumer_model),
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
    failed = [r for r in results if r.failures]
    if failed:  # the trace writer is imported only when there is a trace to write
        from .trace.model import Trace, TraceMeta
        from .trace.save import kvpool_version, save_trace
    for result in failed:
        for number, failure in enumerate(result.failures, 1):
            print_failure(console, result, failure, number)
            if failure.config is None:
                continue
            meta = TraceMeta(
                target=target,
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
            else f"--machine requests --manager {manager}"
        )
        if first.level.consumer is not None:
            events = " --level events" if first.machine == "requests" else ""
            which += f"{events} --consumer {first.level.consumer}"
        if fail_fast:  # the same passes, in the same order
            which += " --fail-fast"
        console.print(
            f"\nReproduce with: kvpool conform --target {target} --profile {chosen_profile.name} "
            f"{which} --seed {run_seed} "
            f"--max-examples {max_examples} --steps {steps} --blocks {blocks}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(EXIT_NONCONFORMANCE)
    if any(not r.passed for r in results):
        sys.exit(EXIT_TOO_FEW_VALID)
    console.print("[green]every run passed[/green]")


@main.command()
@click.option(
    "--target",
    "-t",
    "extra",
    multiple=True,
    help="Also describe this target (repeatable), e.g. vllm==0.24.0 (downloaded if needed).",
)
def targets(extra: tuple[str, ...]) -> None:
    """The targets that can be checked, the actions each one takes, the managers and the
    profiles. vLLM releases already in the cache are described too."""
    from kvpool.spec import ALL_ACTIONS

    from .targets.engines import ENGINE_SPECS
    from .targets.engines import LISTED as ENGINE_LISTED
    from .targets.engines import MANAGERS as ENGINE_MANAGERS
    from .targets.vllm.wheel import cache_root, valid_cache

    console = Console()
    forms = Table(title="targets (--target)", show_header=False)
    forms.add_column("target", no_wrap=True)
    forms.add_column("what it is")
    for name, (_, description) in BUILT_IN.items():
        forms.add_row(name, description)
    for form, description in VLLM_SPECS.items():
        forms.add_row(form, description)
    for form, description in ENGINE_SPECS.items():
        forms.add_row(form, description)
    forms.add_row("module:factory", "your own pool (see kvpool conform --help)")
    console.print(forms)
    cached = sorted(
        (d.name for d in (cache_root() / "vllm").glob("*") if valid_cache(d, d.name)),
        key=_version_key,
    )
    described: list[tuple[str, str, str, frozenset[str] | str]] = []
    for name in [*BUILT_IN, *(f"vllm=={v}" for v in cached), *ENGINE_LISTED, *extra]:
        described.append(_describe_target(name))
    matrix = Table(title="actions each target takes (profile: the default --profile)")
    matrix.add_column("action", no_wrap=True)
    for name, version, profile, _ in described:
        matrix.add_column(f"{name}\n{version}\n{profile}", justify="center")
    rows = [(a.operation, a.operation) for a in ALL_ACTIONS]
    rows.insert(2, ("free_blocks(evict_first)", EVICT_FIRST))
    for label, operation in rows:
        marks = [
            ("yes" if operation in ops else "-") if isinstance(ops, frozenset) else "?"
            for _, _, _, ops in described
        ]
        matrix.add_row(label, *marks)
    console.print(matrix)
    for name, _, _, ops in described:
        if isinstance(ops, str):
            console.print(f"  {name}: {ops}", markup=False, highlight=False, soft_wrap=True)
    managers = Table(title="managers (--manager, the requests machine)", show_header=False)
    managers.add_column("manager", no_wrap=True)
    managers.add_column("what it is")
    for name, (_, description) in BUILT_IN_MANAGERS.items():
        managers.add_row(name, description)
    from .targets.vllm.manager_loading import DESCRIPTION, manager_offer

    managers.add_row("vllm", DESCRIPTION)
    managers.add_row(
        "lmdeploy",
        "the DefaultBlockManager with its BlockTrie of the LMDeploy release --target names "
        "(what --manager auto runs on an LMDeploy target; needs the lmdeploy extra: numpy)",
    )
    for name in ENGINE_MANAGERS:
        managers.add_row(name, _describe_manager(name))
    managers.add_row("module:factory", "your own manager target, from (setup, profile)")
    console.print(managers)
    offers = Table(title="vLLM releases in the cache: --manager vllm", show_header=False)
    offers.add_column("release", no_wrap=True)
    offers.add_column("offers it")
    for version in cached:
        offers.add_row(f"vllm=={version}", manager_offer(version))
    console.print(offers)
    profiles = Table(title="profiles (--profile)", show_header=False)
    profiles.add_column("profile", no_wrap=True)
    profiles.add_column("what it captures")
    for known in PROFILES.values():
        profiles.add_row(known.name, known.description)
    console.print(profiles)


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


def _describe_manager(name: str) -> str:
    """A manager-only target's description: what it loads (its version), or why not."""
    from .targets.engines import ENGINE_SPECS

    try:
        factory, _ = load_manager(name, name)
    except TargetLoadError as exc:
        return f"{ENGINE_SPECS[name]}; unavailable: {str(exc).splitlines()[0]}"
    return f"{getattr(factory, 'name', name)}: {ENGINE_SPECS[name]}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def _describe_target(name: str) -> tuple[str, str, str, frozenset[str] | str]:
    """A target's name, version, default profile and actions (or why it is unavailable)."""
    from .trace.save import kvpool_version

    try:
        profile = default_profile(name) or "seed"
        factory, _ = load_target(name)
        probe = factory(PoolConfig(2), get_profile(profile))
    except Exception as exc:  # not installed, not downloadable: say so in the table
        return name, "", "", f"unavailable: {exc}".splitlines()[0]
    version = getattr(probe, "version", None) or (
        kvpool_version() if name in ("impl", "spec") else ""
    )
    offered = get_profile(profile).operations | {EVICT_FIRST}
    operations = probe.operations & offered
    return name, str(version), profile, frozenset(operations)


@main.command()
@click.option("--target", "-t", default="impl", show_default=True, help="The pool to drive.")
@click.option(
    "--manager",
    default="auto",
    show_default=True,
    help="Also run the workload on this manager target ('auto': the target's own, 'none').",
)
@click.option(
    "--profile",
    "-p",
    default=None,
    help="Expected behaviour (default: the target's own profile, else seed).",
)
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
@click.option("--blocks", default=64, show_default=True, type=click.IntRange(2))
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(1))
@click.option(
    "--groups",
    default="full",
    show_default=True,
    help="KV-cache groups, a comma list of 'full' and 'sliding:N' (a window of N blocks).",
)
@click.option("--hash-block-size", default=16, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=0, show_default=True, type=int)
def workload(
    target: str,
    manager: str,
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
        chosen_profile = get_profile(profile or default_profile(target) or "seed")
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
    sys.exit(EXIT_NONCONFORMANCE if failed else EXIT_PASS)


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


@main.command()
def rules() -> None:
    """Explain every rule, invariant and property the suite checks, by the id it reports."""
    from kvpool.spec import EVENT_PROPERTIES, INVARIANTS, RULES
    from kvpool.spec.consumer import MODEL_DESCRIPTIONS
    from kvpool.spec.manager import PROPERTIES

    console = Console()
    sections = [
        ("caller's contract (refused with ContractViolation, rule id)", RULES),
        ("pool invariants (hold after every action)", _first_lines(INVARIANTS)),
        ("request-level properties (checked after every request action)", PROPERTIES),
        ("KV event properties (checked at the events level after every step)", EVENT_PROPERTIES),
        ("consumer models (kvpool conform --level events --consumer MODEL)", MODEL_DESCRIPTIONS),
    ]
    for title, entries in sections:
        table = Table(title=title, show_lines=False)
        table.add_column("id", no_wrap=True)
        table.add_column("meaning")
        for name, text in entries.items():
            table.add_row(name, text)
        console.print(table)


def _first_lines(predicates: Mapping[str, Callable[..., bool]]) -> dict[str, str]:
    """Each predicate's docstring summary, without its number in the contract."""
    texts = {}
    for name, predicate in predicates.items():
        summary = (predicate.__doc__ or name).strip().splitlines()[0]
        number, _, rest = summary.partition(". ")
        texts[name] = rest if number.isdigit() else summary
    return texts


@main.command()
@click.argument("trace_file", type=click.Path(dir_okay=False))
@click.option("--target", "-t", default=None, help="Replay against this target instead.")
@click.option("--manager", default=None, help="Replay against this manager instead.")
@click.option("--versus", default=None, help="A diff trace: replay against this pool B instead.")
def replay(trace_file: str, target: str | None, manager: str | None, versus: str | None) -> None:
    """Replay TRACE_FILE against its target (or --target): exit 0 if the target now
    conforms, 1 with the first diverging step if it still fails (or gives two verdicts for
    one trace: nondeterministic), 2 if the file or target cannot be used.

    A trace file is data: it may name the built-in impl or spec, anything else (a vLLM
    release or tree, module:factory, a manager, a diff's pool B) is loaded only when you
    name it with --target, --manager or --versus; the error says which."""
    from .trace import show
    from .trace.files import TraceFileError, read_trace
    from .trace.replay import replay_trace
    from .trace.trust import NamedInFile

    console = Console()
    try:
        trace = read_trace(Path(trace_file))
        verdict = replay_trace(trace, target, manager, versus=versus)
    except NamedInFile as exc:
        fail_usage(console, f"{exc}; run: {exc.command(trace_file)}")
    except (TraceFileError, TargetLoadError, KeyError, ValueError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        fail_usage(console, message)
    meta = trace.meta
    console.print(
        f"kvpool replay: {trace_file} on {target or meta.target} "
        f"({meta.machine}/{meta.level}, profile {meta.profile}), {len(trace.actions)} actions",
        highlight=False,
        markup=False,
    )
    if verdict.conforms:
        console.print(verdict.describe(), style="green", highlight=False, markup=False)
        sys.exit(EXIT_PASS)
    for i, action in enumerate(verdict.trace.actions, 1):
        marker = "  <- diverges here" if i == verdict.step else ""
        console.print(
            f"  {i:>3}. {show.action_text(action)}{marker}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(verdict.describe(), style="red", highlight=False, markup=False, soft_wrap=True)
    sys.exit(EXIT_NONCONFORMANCE)


@main.command(name="show")
@click.argument("trace_file", type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown"]),
    default="table",
    show_default=True,
    help="markdown: a table to paste into an upstream issue.",
)
def show_trace(trace_file: str, fmt: str) -> None:
    """Render TRACE_FILE as it was recorded: one row per step (action, free queue, ref
    counts, keys, expected and actual), the diverging step marked."""
    from .trace import show
    from .trace.files import TraceFileError, read_trace

    console = Console()
    try:
        trace = read_trace(Path(trace_file))
    except TraceFileError as exc:
        fail_usage(console, str(exc))
    if fmt == "markdown":
        click.echo(show.markdown(trace), nl=False)
        return
    for line in show.header_lines(trace):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(show.table(trace))
    verdict = show.divergence(trace)
    if verdict is not None:
        console.print(verdict, style="red", highlight=False, markup=False, soft_wrap=True)


@main.group()
def vectors() -> None:
    """Test vectors: the conformance contract as data (ITF JSON files, any language).

    \b
      kvpool vectors generate --out vectors      write the corpus (byte-identical each run)
      kvpool vectors check vectors --target T    replay it against a target
    """


@vectors.command(name="generate")
@click.option(
    "--out",
    default="vectors",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for the corpus: PROFILE/OPERATION/LEVEL-N.itf.json and "
    "PROFILE/invariants/NAME.itf.json. Files no longer in the corpus are removed.",
)
def vectors_generate(out: str) -> None:
    """Generate the corpus from the spec: every profile, level and operation, and the
    edge of every invariant."""
    from .vectors.generate import write_corpus

    written = write_corpus(Path(out))
    click.echo(f"{len(written)} vectors in {out}")


@vectors.command(name="check")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@click.option("--target", "-t", default="impl", show_default=True, help="The pool to check.")
@click.option(
    "--profile", "-p", default=None, help="Only the vectors of this profile (default: all)."
)
def vectors_check(directory: str, target: str, profile: str | None) -> None:
    """Replay every vector in DIRECTORY against TARGET: a table of passed, failed and
    skipped (an operation the target lacks) per group; exit 1 if any failed."""
    from .trace.files import TraceFileError
    from .vectors.check import check_vectors

    console = Console()
    try:
        results = check_vectors(Path(directory), target, profile)
    except (TraceFileError, TargetLoadError, KeyError) as exc:
        fail_usage(console, exc.args[0] if isinstance(exc, KeyError) else str(exc))
    if not results:
        fail_usage(console, f"no vectors in {directory}" + (f" for {profile}" if profile else ""))
    table = Table(title=f"kvpool vectors check — target {target}")
    for column in ("group", "passed", "failed", "skipped"):
        table.add_column(column, justify="left" if column == "group" else "right")
    for group, result in sorted(results.items()):
        failed = f"[red]{len(result.failed)}[/red]" if result.failed else "0"
        table.add_row(group, str(result.passed), failed, str(result.skipped))
    console.print(table)
    failures = [(g, name, why) for g, r in sorted(results.items()) for name, why in r.failed]
    for group, name, why in failures:
        console.print(f"FAIL {group}/{name}: {why}", markup=False, highlight=False, soft_wrap=True)
    total = sum(r.passed for r in results.values())
    console.print(f"{total} passed, {len(failures)} failed", highlight=False)
    sys.exit(EXIT_NONCONFORMANCE if failures else EXIT_PASS)
