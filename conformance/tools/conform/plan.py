"""What ``kvpool conform`` will run, decided before anything runs: the target and its
factory, the manager, the profile, the expectations, the machines, the runs and their
sizes. :func:`plan` reads the command line into a :class:`Plan` (a usage error, exit 2,
for anything that cannot be run: nothing has run then); ``--plan`` prints it and stops."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from kvpool.spec import PoolConfig, Profile, get_profile
from kvpool.spec.manager import ManagerConfig
from rich.console import Console

from ...consumers.naming import parse_consumer
from ...consumers.protocol import ConsumerError
from ...engines.vllm_api.features import inferred_lines
from ...hooks import manager_target_problems
from ...machines.pool.expectations import Expectations, ExpectationsError, read_expectations
from ...machines.pool.levels import LEVELS, MACHINES, REQUEST_MIN_BLOCKS, Level
from ...machines.pool.surface import surface_message, surface_problems
from ...machines.pool.target import Target, TargetFactory
from ...machines.requests.machine import RunBuilder
from ...machines.requests.runner import (
    ON_MANAGER,
    ON_POOL,
    events_on_manager,
    events_on_pool,
    manager_builder,
    pool_builder,
)
from ...machines.requests.target import RequestSetup
from ...targets.description import TargetDescription
from ...targets.loading import TargetLoadError, choose_profile, entry_of, load_manager, load_target
from ...targets.registry import describe_target
from ...usage import comma_names, fail_usage


@dataclass(frozen=True)
class Options:
    """``kvpool conform``'s command line, as click parsed it."""

    target: TargetDescription
    profile: str | None
    levels: str | None
    consumer: str | None
    machines: str
    manager: TargetDescription | str
    max_examples: int
    steps: int
    seed: int | None
    blocks: int
    max_findings: int
    fail_fast: bool
    min_valid: float
    trace_dir: str
    coverage: bool
    expect_file: Path | None
    check_contracts: bool


@dataclass(frozen=True)
class Plan:
    """Everything a conform run needs, resolved: what runs, on what, how big."""

    options: Options
    target: TargetDescription
    name: str
    factory: TargetFactory
    probe: Target
    profile: Profile
    #: Why the profile was chosen (``None``: ``--profile`` named it).
    profile_reason: str | None
    manager_text: str
    manager_name: str
    alone: bool
    expected: Expectations | None
    level_names: list[str]
    machine_names: list[str]
    consumer_model: str
    request_runs: list[tuple[Level, RunBuilder]]
    seed: int
    fail_fast: bool

    @property
    def pool_levels(self) -> list[str]:
        return self.level_names if "pool" in self.machine_names else []

    @property
    def per_run(self) -> int:
        """Distinct findings one run collects before it stops."""
        return 1 if self.fail_fast else self.options.max_findings

    @property
    def floor(self) -> int:
        """Fewest valid test cases a run's last search must run."""
        return math.ceil(self.options.min_valid * self.options.max_examples)

    @property
    def request_blocks(self) -> int:
        return max(REQUEST_MIN_BLOCKS, self.options.blocks)


@dataclass(frozen=True)
class _Loaded:
    """What the command line names, loaded: the target (the spec's pool when a manager
    runs alone), the runs asked for, the profile, the pool factory and the manager."""

    target: TargetDescription
    level_names: list[str]
    machine_names: list[str]
    alone: bool
    profile: Profile
    default_reason: str
    manager_only: bool
    factory: TargetFactory
    name: str
    manager_factory: Any
    manager_name: str


def plan(options: Options, console: Console) -> Plan:
    """The plan of ``options``; a usage error (exit 2) for anything that cannot run."""
    loaded = _load(options, console)
    expected = _expectations(options, console)
    profile, name, factory = loaded.profile, loaded.name, loaded.factory
    problems = surface_problems(factory, profile, PoolConfig(4))
    if problems:
        fail_usage(console, surface_message(name, problems))
    try:
        probe = factory(PoolConfig(2), profile)
    except Exception as exc:  # the user's factory failed to build a pool
        fail_usage(console, f"target {name!r} could not build a pool: {type(exc).__name__}: {exc}")
    level_names = loaded.level_names
    consumer_model = _events(options, console, name, probe, profile, level_names, loaded)
    _check_manager(options, console, loaded)
    return Plan(
        options=options,
        target=loaded.target,
        name=name,
        factory=factory,
        probe=probe,
        profile=profile,
        profile_reason=None if options.profile else loaded.default_reason,
        manager_text=_manager_text(options.manager),
        manager_name=loaded.manager_name,
        alone=loaded.alone,
        expected=expected,
        level_names=level_names,
        machine_names=loaded.machine_names,
        consumer_model=consumer_model,
        request_runs=_request_runs(options, loaded, consumer_model),
        seed=options.seed if options.seed is not None else random.randrange(2**32),
        fail_fast=options.fail_fast or options.max_findings == 1,
    )


def _manager_text(manager: TargetDescription | str) -> str:
    return manager if isinstance(manager, str) else manager.text


def _load(options: Options, console: Console) -> _Loaded:
    """The command line's names, read and loaded; a usage error for anything that cannot
    be."""
    try:
        level_names = comma_names(options.levels or "safety,order,robustness", LEVELS, "level")
        machine_names = comma_names(options.machines, MACHINES, "machine")
        target, machine_names, alone = _manager_alone(
            options.target, options.manager, machine_names
        )
        default = choose_profile(target)
        profile = get_profile(options.profile or default.name)
        manager_text = _manager_text(options.manager)
        manager_only = not entry_of(target).has_pool  # nano-vllm: a manager, no pool API
        if manager_only:
            machine_names = _manager_only_machines(
                console, target.text, machine_names, manager_text
            )
        else:
            factory, name = load_target(target)
        manager_factory, manager_name = load_manager(options.manager, target)
        if manager_only:
            factory, name = load_target("spec")[0], getattr(manager_factory, "name", target.text)
    except (click.BadParameter, KeyError, TargetLoadError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        fail_usage(console, message)
    return _Loaded(
        target, level_names, machine_names, alone, profile, default.reason, manager_only,
        factory, name, manager_factory, manager_name,
    )  # fmt: skip


def _expectations(options: Options, console: Console) -> Expectations | None:
    if options.expect_file is None:
        return None
    try:
        return read_expectations(options.expect_file)
    except ExpectationsError as exc:
        fail_usage(console, str(exc))


def _events(
    options: Options,
    console: Console,
    name: str,
    probe: Target,
    profile: Profile,
    level_names: list[str],
    loaded: _Loaded,
) -> str:
    """Adds the events level where the target publishes events and ``--level`` was left
    out; checks ``--consumer``; returns the consumer model the events level judges by."""
    emits = "take_events" in probe.operations and profile.offers("take_events")
    if options.levels is None and emits:
        level_names.append("events")
    # a manager-only target publishes (or not) its own events: judged on its manager run
    if "events" in level_names and not emits and not loaded.manager_only:
        fail_usage(
            console,
            f"target {name!r} publishes no KV events (its pool has no take_events), so the "
            "events level cannot run; leave it out of --level",
        )
    if options.consumer is not None and "events" not in level_names:
        fail_usage(console, "--consumer judges the events level, which this run leaves out")
    if options.consumer is not None:
        try:
            parse_consumer(options.consumer)
        except ConsumerError as exc:
            fail_usage(console, str(exc))
    return options.consumer or profile.consumer_contract or "count"


def _check_manager(options: Options, console: Console, loaded: _Loaded) -> None:
    """Builds the manager once: a usage error when it cannot be built, or cannot publish
    the events the events level would judge."""
    manager_factory, manager_name = loaded.manager_factory, loaded.manager_name
    if manager_factory is None:
        return
    asked = options.levels is not None and "events" in loaded.level_names
    events_asked = loaded.manager_only and asked
    setup = RequestSetup(ManagerConfig(1), PoolConfig(2, enable_kv_cache_events=events_asked))
    try:
        built = manager_factory(setup, loaded.profile)
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


def _request_runs(
    options: Options, loaded: _Loaded, consumer_model: str
) -> list[tuple[Level, RunBuilder]]:
    """The request machine's runs: on the target's pool, judged by the consumer too when
    events were asked for, and on the manager (its own stream judged, for a manager-only
    target)."""
    runs: list[tuple[Level, RunBuilder]] = []
    if "requests" not in loaded.machine_names:
        return runs
    factory, profile, manager_factory = loaded.factory, loaded.profile, loaded.manager_factory
    manager_only, level_names = loaded.manager_only, loaded.level_names
    events_asked = options.levels is not None and "events" in level_names
    if not manager_only:
        runs.append((ON_POOL, pool_builder(factory, profile)))
        if events_asked:
            # asked for: the spec's manager's pool calls judged by the consumer too (not
            # in a default run, which judges the stream on the pool machine only)
            judged = pool_builder(factory, profile, consumer_model)
            runs.append((events_on_pool(consumer_model), judged))
    if manager_factory is not None and not (manager_only and level_names == ["events"]):
        runs.append((ON_MANAGER, manager_builder(manager_factory, profile)))
    if manager_only and events_asked:
        # a manager with no pool API that publishes its own events: its stream judged
        judged = manager_builder(manager_factory, profile, consumer_model)
        runs.append((events_on_manager(consumer_model), judged))
    return runs


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


def print_plan(console: Console, chosen: Plan) -> None:
    """``--plan``: what the run would do, printed before anything runs."""
    options = chosen.options
    runs = [f"pool/{name}" for name in chosen.pool_levels]
    runs += [f"requests/{level.name}" for level, _ in chosen.request_runs]
    expected = chosen.expected
    lines = {
        "target": f"{chosen.name} ({chosen.target.text})",
        "profile": f"{chosen.profile.name}"
        + (f" ({chosen.profile_reason})" if chosen.profile_reason else " (--profile)"),
        "manager": chosen.manager_name,
        "expectations": "none"
        if expected is None
        else f"{expected.source} ({len(expected.entries)} known finding(s))",
        "machines": ", ".join(chosen.machine_names),
        "runs": ", ".join(runs) or "none",
        "events judged by": chosen.consumer_model
        if "events" in chosen.level_names
        else "no events level",
        "sizes": f"{options.max_examples} test cases per run of at most {options.steps} "
        f"actions; pools of up to {options.blocks} blocks (the requests machine: "
        f"{chosen.request_blocks}); seed {chosen.seed}",
        "stops": f"after {chosen.per_run} distinct finding(s) per run"
        + ("; the whole command at its first finding" if chosen.fail_fast else "")
        + f"; a run under {chosen.floor} valid test cases fails (--min-valid)",
    }
    # in full: each feature inferred from the pool's names and where it was found (the
    # header's lines after its title), for kvpool's own pool too
    inferred = inferred_lines(chosen.probe, in_full=True)[1:]
    if inferred:
        lines["inferred"] = "; ".join(line.strip() for line in inferred)
    console.print("kvpool conform --plan (nothing has run):", highlight=False)
    for key, value in lines.items():
        console.print(f"  {key:<17} {value}", highlight=False, markup=False, soft_wrap=True)
