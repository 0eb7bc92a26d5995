"""kvpool's pytest plugin: a pool's own test suite runs the conformance machines as tests.

Installed with kvpool-spec (entry point ``pytest11``) and off until asked. Without a target
it adds no tests, changes no setting and imports nothing of kvpool's beyond this file and its
defaults (:mod:`.pytest_defaults`), so it costs nothing in the pytest runs of every project
that installs us. Asked with::

    pytest --kvpool-target=mypkg.pool:make_pool

(or ``kvpool_target = mypkg.pool:make_pool`` in the pytest ini options), it adds one test per
run: ``kvpool::pool/safety``, ``kvpool::pool/order``, ``kvpool::pool/robustness``,
``kvpool::requests/pool`` (and ``kvpool::requests/manager`` when a manager is checked). A
failing test shows the rule broken and the shrunk action sequence, and writes the trace and
its pytest file, as ``kvpool conform`` does.

A project that prefers code to flags writes a ``test_conformance.py``::

    from kvpool.conformance.pytest_plugin import conformance_tests

    test_conformance = conformance_tests("mypkg.pool:make_pool")
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .pytest_defaults import DEFAULT_LEVELS, DEFAULT_MACHINES, DEFAULT_SETTINGS, SETTINGS_NAMES

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr, TracebackStyle

    from .pytest_run import LoadedTarget, Outcome, Plan


#: Each option: its name after ``--kvpool-`` (and after ``kvpool_`` in the ini file), its
#: default, and its help.
OPTIONS: tuple[tuple[str, str | None, str], ...] = (
    (
        "target",
        None,
        "the pool to check, as module:factory (a factory taking vLLM's BlockPool arguments, "
        "or a Target from (config, profile)), or impl, spec, vllm==X.Y.Z. Without it the "
        "plugin adds no tests.",
    ),
    ("level", DEFAULT_LEVELS, "comma list of pool levels to check"),
    ("profile", None, "the pool behaviour expected (default: the target's own, else seed)"),
    ("machine", DEFAULT_MACHINES, "comma list of machines: pool, requests"),
    (
        "manager",
        "auto",
        "the KV cache manager for the requests machine: auto, none, or module:factory",
    ),
    (
        "settings",
        DEFAULT_SETTINGS,
        "how hard to look: dev (quick, fresh seed), ci (kvpool conform's defaults, fixed "
        "seed), deep (long runs, larger pools)",
    ),
    ("seed", None, "seed for drawing actions (default: 0 under ci, else random per session)"),
    ("trace-dir", "kvpool-traces", "where failures' traces and pytest files are written"),
)
_PLAN = pytest.StashKey["Plan"]()
_LOADED = pytest.StashKey[dict[str, "LoadedTarget"]]()
_OUTCOMES = pytest.StashKey[list["Outcome"]]()
_SESSION_SEED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvpool", "kvpool conformance of a block pool")
    for name, default, text in OPTIONS:
        shown = f" (default: {default})" if default else ""
        kwargs: dict[str, Any] = {}
        if name == "settings":
            kwargs["choices"] = SETTINGS_NAMES
        if name == "seed":
            kwargs["type"] = int
        group.addoption(
            f"--kvpool-{name}",
            dest=_dest(name),
            default=None,
            metavar=name.split("-")[0].upper(),
            help=text + shown,
            **kwargs,
        )
        parser.addini(_dest(name), f"kvpool: {text}{shown}", default="")


def _dest(name: str) -> str:
    return "kvpool_" + name.replace("-", "_")


def option(config: pytest.Config, name: str) -> str | None:
    """A kvpool option: the command line's, else the ini file's, else its default. An empty
    ``--kvpool-target=`` turns an ini file's target off for one run."""
    given = config.getoption(_dest(name))
    if given is not None:
        return str(given)
    ini = config.getini(_dest(name))
    if isinstance(ini, str) and ini.strip():
        return ini.strip()
    return dict((n, d) for n, d, _ in OPTIONS)[name]


def _session_seed(config: pytest.Config) -> int:
    return config.stash.setdefault(_SESSION_SEED, random.randrange(2**32))


def build_plan(
    config: pytest.Config,
    target: str,
    levels: str,
    machines: str,
    profile: str | None,
    manager: str,
) -> Plan:
    """The plan for ``target``, with this session's settings, seed and trace directory;
    :class:`~.pytest_run.PlanError` names an option that is wrong."""
    from .pytest_run import PlanError, make_plan

    seed_text = option(config, "seed")
    try:
        seed = None if seed_text is None else int(seed_text)
    except ValueError:
        raise PlanError(f"kvpool_seed: {seed_text!r} is not an integer") from None
    return make_plan(
        target,
        levels=levels,
        machines=machines,
        profile=profile,
        manager=manager,
        settings_name=option(config, "settings") or DEFAULT_SETTINGS,
        seed=seed,
        session_seed=_session_seed(config),
        trace_dir=config.invocation_params.dir / (option(config, "trace-dir") or "kvpool-traces"),
    )


def _flag_plan(config: pytest.Config) -> Plan | None:
    """The plan the kvpool options ask for, or ``None`` when no target is set."""
    if _PLAN in config.stash:
        return config.stash[_PLAN]
    target = option(config, "target")
    if not target:
        return None
    from .pytest_run import PlanError

    try:
        plan = build_plan(
            config,
            target,
            option(config, "level") or "",
            option(config, "machine") or "",
            option(config, "profile"),
            option(config, "manager") or "auto",
        )
    except PlanError as exc:
        raise pytest.UsageError(f"kvpool: {exc}") from None
    config.stash[_PLAN] = plan
    return plan


def _loaded(config: pytest.Config, plan: Plan) -> LoadedTarget:
    """The plan's target, loaded once per session."""
    from .pytest_run import load

    cache = config.stash.setdefault(_LOADED, {})
    key = f"{plan.target}|{plan.profile}|{plan.manager}"
    if key not in cache:
        cache[key] = load(plan)
    return cache[key]


def pytest_report_header(config: pytest.Config) -> str | None:
    plan = _flag_plan(config)
    if plan is None:
        return None
    hypothesis = plan.hypothesis
    return (
        f"kvpool: target {plan.target}, settings {plan.settings} ({hypothesis.max_examples} "
        f"examples of up to {hypothesis.stateful_step_count} steps), seed {plan.seed}, "
        f"traces to {plan.trace_dir}"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add the kvpool tests when a target is set (before ``-k``/``-m`` select among items)."""
    plan = _flag_plan(config)
    if plan is None:
        return
    from .pytest_run import PlanError, run_names

    try:
        _loaded(config, plan)
        runs = run_names(plan)
    except PlanError as exc:
        raise pytest.UsageError(f"kvpool: {exc}") from None
    collector = KvpoolRuns.from_parent(session, name="kvpool", nodeid="kvpool", runs=runs)
    items.extend(session.genitems(collector))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """The ``kvpool conform`` results table of the kvpool tests that ran."""
    outcomes = config.stash.get(_OUTCOMES, [])
    if not outcomes:
        return
    from .pytest_run import summary_lines

    terminalreporter.section("kvpool conformance")
    for line in summary_lines(outcomes, config.get_terminal_writer().fullwidth):
        terminalreporter.write_line(line)


class KvpoolFailure(AssertionError):
    """A kvpool test found a nonconformance; the message is the whole report."""


class KvpoolRuns(pytest.Collector):
    """The kvpool tests of the target the options name."""

    def __init__(self, *, runs: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runs = runs

    def collect(self) -> list[pytest.Item]:
        return [KvpoolItem.from_parent(self, name=run) for run in self.runs]


class KvpoolItem(pytest.Item):
    """One run of the conformance suite (``pool/LEVEL`` or ``requests/ON``) as a test."""

    def runtest(self) -> None:
        plan = _flag_plan(self.config)
        assert plan is not None, "a kvpool test without a target"
        outcome = run_and_record(self.config, self, plan, self.name, self._rerun(plan))
        if not outcome.passed:
            raise KvpoolFailure(outcome.report)

    def _rerun(self, plan: Plan) -> str:
        machine, _, level = self.name.partition("/")
        which = (
            f"--kvpool-machine=pool --kvpool-level={level}"
            if machine == "pool"
            else f"--kvpool-machine=requests --kvpool-manager={plan.manager}"
        )
        profile = f" --kvpool-profile={plan.profile}" if plan.profile else ""
        return (
            f"pytest --kvpool-target={plan.target}{profile} {which} "
            f"--kvpool-settings={plan.settings} --kvpool-seed={plan.seed}"
        )

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: TracebackStyle | None = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, KvpoolFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"kvpool {self.name}"


def run_and_record(
    config: pytest.Config, item: pytest.Item, plan: Plan, run: str, rerun: str
) -> Outcome:
    """Run ``run`` (``pool/safety``, ...) for ``item``; keep the outcome for the summary
    table, and its counts and traces as the item's ``kvpool_*`` properties (JUnit XML)."""
    from .pytest_run import PlanError, execute

    try:
        loaded = _loaded(config, plan)
    except PlanError as exc:
        pytest.fail(f"kvpool: {exc}", pytrace=False)
    outcome = execute(plan, loaded, run, rerun)
    config.stash.setdefault(_OUTCOMES, []).append(outcome)
    item.user_properties.append(("kvpool_examples", outcome.result.record.examples))
    item.user_properties.append(("kvpool_steps", outcome.result.record.steps))
    item.user_properties.append(("kvpool_traces", [str(p) for p in outcome.traces]))
    return outcome


def conformance_tests(
    target: str,
    *,
    levels: str = DEFAULT_LEVELS,
    machines: str = DEFAULT_MACHINES,
    profile: str | None = None,
    manager: str = "auto",
) -> Callable[..., None]:
    """A test function for ``target``, one test per run: bind it to a ``test_`` name in a
    test module::

        test_conformance = conformance_tests("mypkg.pool:make_pool")

    The runs are the plugin's (``test_conformance[pool/safety]``, ...); ``--kvpool-settings``,
    ``--kvpool-seed`` and ``--kvpool-trace-dir`` (or their ini options) apply to them.
    A wrong level, machine or manager fails at import, with the option named.
    """
    from .pytest_run import make_plan, run_names

    runs = run_names(
        make_plan(target, levels=levels, machines=machines, profile=profile, manager=manager)
    )

    @pytest.mark.parametrize("kvpool_run", runs)
    def test_conformance(kvpool_run: str, request: pytest.FixtureRequest) -> None:
        __tracebackhide__ = True
        from .pytest_run import PlanError

        try:
            plan = build_plan(request.config, target, levels, machines, profile, manager)
        except PlanError as exc:
            pytest.fail(f"kvpool: {exc}", pytrace=False)
        rerun = (
            f"pytest '{request.node.nodeid}' --kvpool-settings={plan.settings} "
            f"--kvpool-seed={plan.seed}"
        )
        outcome = run_and_record(request.config, request.node, plan, kvpool_run, rerun)
        if not outcome.passed:
            pytest.fail(outcome.report, pytrace=False)

    return test_conformance
