"""One conformance run as a pytest test runs it: the plan, the settings profile, the run, and
the failure report with its traces.

The pytest plugin (:mod:`.pytest_plugin`) stays cheap to import by importing this module only
once a target is asked for; everything here is plain Python over :func:`.runner.run_level`
and :func:`.manager.runner.run_requests`, the same runs ``kvpool conform`` makes.
"""

from __future__ import annotations

import io
import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings as Settings
from hypothesis.errors import InvalidArgument
from kvpool.spec import PoolConfig, Profile, get_profile
from kvpool.spec.manager import ManagerConfig
from rich.console import Console

from .machines.pool.levels import LEVELS, MACHINES, REQUEST_MIN_BLOCKS
from .machines.pool.runner import LevelResult, run_level
from .machines.pool.target import TargetFactory
from .machines.requests.runner import (
    ON_MANAGER,
    ON_POOL,
    manager_builder,
    pool_builder,
    run_requests,
)
from .machines.requests.target import ManagerTargetFactory, RequestSetup
from .pytest_defaults import DEFAULT_LEVELS, DEFAULT_MACHINES, DEFAULT_SETTINGS, SETTINGS_NAMES
from .report import print_failure, results_table
from .targets.loading import TargetLoadError, choose_profile, load_manager, load_target
from .trace.model import Trace, TraceMeta
from .trace.save import kvpool_version, save_trace


class PlanError(Exception):
    """A kvpool option names nothing usable; the message says which option and what to fix."""


@dataclass(frozen=True)
class RunSettings:
    """How hard one settings profile (``--kvpool-settings``) looks.

    ``max_examples``, ``steps`` and ``derandomize`` are registered with Hypothesis as the
    profile ``kvpool-NAME`` (a project may register its own under that name first, in its
    conftest.py, to change them); the pool sizes and the findings per test are kvpool's own.
    No profile has a deadline: a slow pool, or a long shrink, is not a nonconformance.
    """

    name: str
    max_examples: int
    steps: int
    derandomize: bool
    #: Largest pool drawn (``kvpool conform --blocks``); request runs draw at least
    #: ``REQUEST_MIN_BLOCKS``.
    max_blocks: int
    #: Distinct findings collected per test before it stops (each shrunk, each with a trace).
    max_findings: int


SETTINGS: dict[str, RunSettings] = {
    s.name: s
    for s in (
        # a quick local check, a fresh seed every session
        RunSettings(
            "dev", max_examples=30, steps=30, derandomize=False, max_blocks=8, max_findings=1
        ),
        # kvpool conform's own sizes with one fixed seed: a pass stays a pass, a failure
        # reproduces
        RunSettings(
            "ci", max_examples=150, steps=40, derandomize=True, max_blocks=8, max_findings=3
        ),
        # a nightly hunt: longer runs, larger pools
        RunSettings(
            "deep", max_examples=2000, steps=80, derandomize=False, max_blocks=16, max_findings=10
        ),
    )
}
assert set(SETTINGS) == set(SETTINGS_NAMES), "every --kvpool-settings choice has its sizes"


def hypothesis_profile(name: str) -> Settings:
    """The Hypothesis settings profile ``kvpool-NAME``, registered on first use unless the
    project registered its own under that name."""
    profile_name = f"kvpool-{name}"
    try:
        return Settings.get_profile(profile_name)
    except InvalidArgument:
        chosen = SETTINGS[name]
        Settings.register_profile(
            profile_name,
            max_examples=chosen.max_examples,
            stateful_step_count=chosen.steps,
            derandomize=chosen.derandomize,
            deadline=None,
            database=None,
        )
        return Settings.get_profile(profile_name)


@dataclass(frozen=True)
class Plan:
    """What to check and how hard: a target, its runs, and the options that shape them."""

    target: str
    levels: tuple[str, ...]
    machines: tuple[str, ...]
    profile: str | None
    manager: str
    settings: str
    seed: int
    #: Where failures' traces go, absolute (relative options are taken from where pytest
    #: was started).
    trace_dir: Path

    @property
    def hypothesis(self) -> Settings:
        return hypothesis_profile(self.settings)

    @property
    def sizes(self) -> RunSettings:
        return SETTINGS[self.settings]


def names(value: str, known: Iterable[str], option: str) -> tuple[str, ...]:
    """A comma-separated list of names, each one of ``known``."""
    chosen = tuple(v.strip() for v in value.split(",") if v.strip())
    allowed = tuple(known)
    unknown = [n for n in chosen if n not in allowed]
    if unknown or not chosen:
        raise PlanError(
            f"{option}: unknown {', '.join(unknown) or repr(value)}; "
            f"choose from {', '.join(allowed)}"
        )
    return chosen


def make_plan(
    target: str,
    *,
    levels: str = DEFAULT_LEVELS,
    machines: str = DEFAULT_MACHINES,
    profile: str | None = None,
    manager: str = "auto",
    settings_name: str = DEFAULT_SETTINGS,
    seed: int | None = None,
    session_seed: int | None = None,
    trace_dir: Path = Path("kvpool-traces"),
) -> Plan:
    """A checked plan. The seed is ``seed`` if given, 0 for a derandomized settings profile
    (``ci``), else ``session_seed`` (one random seed for the whole pytest session)."""
    if settings_name not in SETTINGS:
        raise PlanError(
            f"--kvpool-settings: unknown {settings_name!r}; choose from {', '.join(SETTINGS)}"
        )
    if profile is not None:
        try:
            get_profile(profile)
        except KeyError as exc:
            raise PlanError(f"--kvpool-profile: {exc.args[0]}") from None
    if seed is None:
        derandomized = hypothesis_profile(settings_name).derandomize
        seed = 0 if derandomized else session_seed
    if seed is None:
        seed = random.randrange(2**32)
    return Plan(
        target=target,
        levels=names(levels, LEVELS, "--kvpool-level"),
        machines=names(machines, MACHINES, "--kvpool-machine"),
        profile=profile,
        manager=manager,
        settings=settings_name,
        seed=seed,
        trace_dir=trace_dir.resolve(),
    )


def run_names(plan: Plan) -> list[str]:
    """The tests ``plan`` makes, by name: ``pool/LEVEL`` per level, ``requests/pool``, and
    ``requests/manager`` when there is a manager to check. Imports a ``module:factory``
    manager, not the target."""
    runs = [f"pool/{level}" for level in plan.levels] if "pool" in plan.machines else []
    if "requests" in plan.machines:
        runs.append(f"requests/{ON_POOL.name}")
        if _manager(plan)[0] is not None:
            runs.append(f"requests/{ON_MANAGER.name}")
    return runs


def _manager(plan: Plan) -> tuple[ManagerTargetFactory | None, str]:
    try:
        return load_manager(plan.manager, plan.target)
    except TargetLoadError as exc:
        raise PlanError(f"--kvpool-manager: {exc}") from None


@dataclass(frozen=True)
class LoadedTarget:
    """The target and manager a plan names, loaded and built once to show they can be."""

    factory: TargetFactory
    name: str
    profile: Profile
    manager: ManagerTargetFactory | None
    manager_name: str
    version: str | None


def load(plan: Plan) -> LoadedTarget:
    """Import the target (and manager) and build one of each; :class:`PlanError` says why
    that failed."""
    try:
        profile = get_profile(plan.profile or choose_profile(plan.target).name)
        factory, name = load_target(plan.target)
    except TargetLoadError as exc:
        raise PlanError(f"--kvpool-target: {exc}") from None
    except KeyError as exc:
        raise PlanError(f"--kvpool-target: {exc.args[0]}") from None
    manager, manager_name = _manager(plan)
    try:
        probe = factory(PoolConfig(2), profile)
    except Exception as exc:  # the user's factory failed to build a pool
        raise PlanError(
            f"--kvpool-target: {name!r} could not build a pool: {type(exc).__name__}: {exc}"
        ) from None
    if manager is not None:
        try:
            manager(RequestSetup(ManagerConfig(1), PoolConfig(2)), profile)
        except Exception as exc:  # the user's factory failed to build a manager
            raise PlanError(
                f"--kvpool-manager: {manager_name!r} could not be built: "
                f"{type(exc).__name__}: {exc}"
            ) from None
    version = getattr(probe, "version", None)
    return LoadedTarget(factory, name, profile, manager, manager_name, version)


@dataclass(frozen=True)
class Outcome:
    """One test's run: its result, and for a failure the report and the traces written."""

    plan: Plan
    loaded: LoadedTarget
    result: LevelResult
    report: str
    traces: tuple[Path, ...]

    @property
    def passed(self) -> bool:
        return self.result.passed


def execute(plan: Plan, loaded: LoadedTarget, run: str, rerun: str) -> Outcome:
    """Run the test named ``run`` (see :func:`run_names`); on failure, write each finding's
    trace and pytest file under the plan's trace directory and build the report, ending
    with ``rerun`` (how to run this test again) and the matching ``kvpool conform`` line."""
    machine, _, level = run.partition("/")
    sizes = plan.sizes
    hypothesis = plan.hypothesis
    if machine == "pool":
        result = run_level(
            loaded.factory,
            loaded.profile,
            LEVELS[level],
            max_examples=hypothesis.max_examples,
            steps=hypothesis.stateful_step_count,
            seed=plan.seed,
            max_blocks=sizes.max_blocks,
            max_findings=sizes.max_findings,
        )
    else:
        on_manager = level == ON_MANAGER.name
        if on_manager:
            assert loaded.manager is not None, f"{run}: no manager to check"
            build = manager_builder(loaded.manager, loaded.profile)
        else:
            build = pool_builder(loaded.factory, loaded.profile)
        result = run_requests(
            build,
            ON_MANAGER if on_manager else ON_POOL,
            max_examples=hypothesis.max_examples,
            steps=hypothesis.stateful_step_count,
            seed=plan.seed,
            max_blocks=max(REQUEST_MIN_BLOCKS, sizes.max_blocks),
            max_findings=sizes.max_findings,
        )
    if result.passed:
        return Outcome(plan, loaded, result, "", ())
    report, traces = failure_report(plan, loaded, result, rerun)
    return Outcome(plan, loaded, result, report, traces)


def _console(buffer: io.StringIO, width: int = 120) -> Console:
    return Console(file=buffer, width=width, color_system=None, highlight=False)


def _trace_dir(plan: Plan) -> Path:
    """The trace directory as it reads best from here: relative to the working directory
    when it is below it (the printed ``kvpool replay`` line then works as it is)."""
    try:
        relative = Path(os.path.relpath(plan.trace_dir, Path.cwd()))
    except ValueError:  # another drive
        return plan.trace_dir
    return plan.trace_dir if relative.parts[:1] == ("..",) else relative


def failure_report(
    plan: Plan, loaded: LoadedTarget, result: LevelResult, rerun: str
) -> tuple[str, tuple[Path, ...]]:
    """What a failing test shows: every finding (the broken rule and the shrunk action
    sequence, as ``kvpool conform`` prints it), where its trace was written, and how to run
    it again. The traces are written here."""
    buffer = io.StringIO()
    console = _console(buffer)
    hypothesis = plan.hypothesis
    # the first line is what pytest's short summary shows: the first finding itself
    first = result.failures[0].message.splitlines()[0]
    console.print(f"{loaded.name} {result.label}: {first}", soft_wrap=True, markup=False)
    console.print(
        f"(profile {loaded.profile.name}, settings {plan.settings}: {hypothesis.max_examples} "
        f"examples of up to {hypothesis.stateful_step_count} steps, seed {plan.seed})",
        soft_wrap=True,
        markup=False,
    )
    traces: list[Path] = []
    trace_dir = _trace_dir(plan)
    for number, failure in enumerate(result.failures, 1):
        print_failure(console, result, failure, number)
        if failure.config is None:
            continue
        meta = TraceMeta(
            target=plan.target,
            profile=loaded.profile.name,
            machine=result.machine,
            level=result.level.name,
            config=failure.config,
            seed=plan.seed,
            manager=loaded.manager_name if result.machine == "requests" else None,
            target_version=loaded.version,
            kvpool_version=kvpool_version(),
            message=failure.message,
        )
        path = save_trace(console, Trace(meta, failure.trace), trace_dir, number)
        if path is not None:
            traces.append(path)
    which = (
        f"--machine pool --level {result.level.name}"
        if result.machine == "pool"
        else f"--machine requests --manager {plan.manager}"
    )
    console.print(f"\nRun this test again: {rerun}", soft_wrap=True, markup=False)
    console.print(
        f"Or outside pytest:   kvpool conform --target {plan.target} "
        f"--profile {loaded.profile.name} {which} --seed {plan.seed} "
        f"--max-examples {hypothesis.max_examples} --steps {hypothesis.stateful_step_count} "
        f"--blocks {plan.sizes.max_blocks}",
        soft_wrap=True,
        markup=False,
    )
    return buffer.getvalue().rstrip("\n"), tuple(traces)


def summary_lines(outcomes: Sequence[Outcome], width: int) -> list[str]:
    """The ``kvpool conform`` results table for the runs of this session, one table per
    target and profile."""
    buffer = io.StringIO()
    console = _console(buffer, width)
    groups: dict[tuple[str, str, str, int], list[LevelResult]] = {}
    for outcome in outcomes:
        key = (
            outcome.loaded.name,
            outcome.loaded.profile.name,
            outcome.plan.settings,
            outcome.plan.seed,
        )
        groups.setdefault(key, []).append(outcome.result)
    for (name, profile, settings_name, seed), results in groups.items():
        console.print(results_table(name, profile, results))
        console.print(f"settings {settings_name}, seed {seed}", soft_wrap=True)
    return buffer.getvalue().rstrip("\n").splitlines()
