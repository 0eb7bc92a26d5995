"""One lockstep run: the spec and one target, fed the same actions.

:class:`LockstepRun` is plain Python, with no Hypothesis in it, so a drawn run, a replayed
trace and the shrinker all judge a target the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from kvpool.spec import (
    Action,
    AllBlocksCleared,
    ContractViolation,
    GetNewBlocks,
    Observation,
    PeerGetNewBlocks,
    PoolConfig,
    PoolState,
    Profile,
    TakeEvents,
    adopt_allocation,
    broken_invariants,
    initial_state,
    violation,
)

from ...consumers.judge import StreamJudge
from ...ending import innermost_in_kvpool, interrupted_by_user
from ..events.caller import manager_could_call
from ..events.check import taken_events, target_residency
from .compare import compare_observation, compare_views, view_changes
from .contracts import spec_step
from .coverage import situations
from .expectations import Expectation
from .fault import fault_of
from .invariant_check import broken_since
from .levels import Level
from .state_coverage import Cell, Drawable, cells
from .surface import SurfaceMismatch
from .target import EVICT_FIRST, PLAN, PLAN_FIRST, PLAN_NEXT, TAKES, Target, TargetFactory

#: The action that takes a pool's events (the events level sends one after every action).
TAKE = TakeEvents()


class Nonconformance(AssertionError):
    """The target did something the spec does not allow. A step that shows several
    differences keeps them apart (``problems``, each to be read after ``where``), so that a
    known one (:mod:`.expectations`) is told from a new one beside it."""

    def __init__(self, message: str, *, where: str = "", problems: Sequence[str] = ()) -> None:
        # the first of ``problems`` is the step's root (the order the comparisons report)
        super().__init__(message)
        self.where = where
        self.problems = tuple(problems)


def differences(where: str, problems: Sequence[str]) -> Nonconformance:
    """The nonconformance of a step that showed ``problems`` (``where``: its prefix)."""
    return Nonconformance(where + "; ".join(problems), where=where, problems=problems)


class SpecSelfCheckFailed(Exception):
    """The spec broke its own invariants: a bug of the spec (kvpool's), never a finding.
    Raised, not asserted, so that it holds under ``python -O`` too."""


def check_spec_invariants(broken: Sequence[str], where: str) -> None:
    """The spec's self-check: raise :class:`SpecSelfCheckFailed` if ``broken`` names any
    invariant of a state the spec reached (``where``: in a new pool, or after a step)."""
    if broken:
        raise SpecSelfCheckFailed(f"the spec broke its own invariants {list(broken)} {where}")


class ExpectedEnd(Exception):
    """A test case met a known finding whose state the spec cannot take: it ends there,
    counted (``RunRecord.expected_ended``), neither valid nor a finding."""


@dataclass
class RunRecord:
    """What the runs of one level saw."""

    examples: int = 0
    steps: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    situations: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    #: The actions of the latest test case, and the pool (or manager) it was run on.
    trace: list[Any] = field(default_factory=list)
    config: Any = None
    #: Request-level properties evaluated, by name.
    properties: Counter[str] = field(default_factory=Counter)
    #: Test cases that ran at least one action and ended with nothing raised.
    valid: int = 0
    #: Test cases dropped because they ran into a finding already reported.
    rejected: int = 0
    #: Draws not run: outside the contract at a level that stays inside it.
    skipped: int = 0
    #: CPU seconds (``time.process_time``) spent drawing and running test cases, the sweep
    #: included (shrinking not).
    exploring_seconds: float = 0.0
    #: Valid test cases of the run's last search, the one that found nothing new (``None``
    #: while no search has ended empty-handed).
    searched: int | None = None
    #: Accepted pool actions by (operation, state of a block it names): see
    #: :mod:`.state_coverage`; ``drawable`` says which cells the run could reach.
    cells: Counter[Cell] = field(default_factory=Counter)
    drawable: Drawable | None = None
    #: Test cases that ran a cell's witness at the end of the run (:mod:`.sweep`), for the
    #: reachable cells the drawn ones missed.
    swept: int = 0
    #: Known findings (:mod:`.expectations`) met, by rule; test cases one of them ended.
    expected: Counter[Expectation] = field(default_factory=Counter)
    expected_ended: int = 0


class Outcomes(NamedTuple):
    """What the latest action gave: the spec's observation (or the rule it breaks) and the
    target's (or the exception it raised); ``None`` where that side has not answered. (A
    named tuple: a step sets it up to three times, and a frozen dataclass costs more to
    build.)"""

    expected: Observation | ContractViolation | None
    actual: Observation | Exception | None


class LockstepRun:
    """The spec and a fresh target built from ``config``, compared after every action."""

    def __init__(
        self,
        factory: TargetFactory,
        profile: Profile,
        level: Level,
        config: PoolConfig,
        record: RunRecord | None = None,
        first: Sequence[Action] = (),
    ) -> None:
        """``first``: the actions the run applies first, when it knows them (a replay),
        said to the target's factory (:data:`~.target.PLAN_FIRST`) and to the target."""
        self.level = level
        config = run_config(level, config)
        plan_first = getattr(factory, PLAN_FIRST, None)
        if first and plan_first is not None:
            plan_first(self.sent(first))
        self.record = record if record is not None else RunRecord()
        self.record.trace = []
        self.record.config = config
        self.state: PoolState = initial_state(config, profile)
        check_spec_invariants(broken_invariants(self.state), "in a new pool")
        #: The latest state found to keep every invariant (a step's are checked against it).
        self.checked: PoolState = self.state
        self.target: Target = factory(config, profile)
        self.operations = profile.operations & self.target.operations
        self.evict_first = profile.has_evict_first and EVICT_FIRST in self.target.operations
        self.peer = "peer_get_new_blocks" in self.operations
        self.record.drawable = Drawable(profile, self.operations, self.evict_first)
        self.last = Outcomes(None, None)
        #: The events level's consumer of the target's stream (``None`` at other levels).
        self.events: StreamJudge | None = None
        if level.consumer is not None:
            if "take_events" not in self.operations:
                raise ValueError(f"target {self.target.name!r} publishes no KV events")
            self.events = StreamJudge(level.consumer)
        if first:
            self.plan(first)
        self.check_view("after construction")

    def plan(self, actions: Sequence[Action]) -> None:
        """Tell the target which actions come next (:func:`plan_ahead`)."""
        plan_ahead(self.target, self.sent(actions))

    def sent(self, actions: Sequence[Action]) -> Sequence[Action]:
        """What the target is sent for ``actions``: each followed by the ``take_events``
        the run sends after it at the events level."""
        return sent_actions(self.level, actions)

    def can_apply(self, action: Action) -> bool:
        """Whether this target takes ``action`` at all (operation and arguments)."""
        if action.operation not in self.operations:
            return False
        evict_first = getattr(action, "evict_first", False)
        foreign = getattr(action, "foreign", ())
        if not ((self.evict_first or not evict_first) and (self.peer or not foreign)):
            return False
        takes = getattr(self.target, TAKES, None)
        return takes is None or bool(takes(action))

    def apply(self, action: Action) -> Observation | None:
        """Apply ``action`` to both; raise :class:`Nonconformance` on any difference
        other than a known one (:mod:`.expectations`): a known finding is counted, the spec
        adopts the target's state and the run goes on (:class:`ExpectedEnd` when it cannot).

        Returns what the spec expected (``None`` when the action was rightly refused, or
        the difference was a known one).
        """
        try:
            return self.judge(action)
        except Nonconformance as exc:
            known = self.level.expected
            if known is None:
                raise
            parts = [exc.where + p for p in exc.problems] if exc.problems else [str(exc)]
            entry = known.match(parts[0], self.level.name)
            if entry is None:  # the step's root difference is new: that is the finding
                raise
            # the differences after the root follow from it (they are the same step's)
            self.record.expected[entry] += 1
            self.adopt_target_state(entry.rule)
            return None

    def adopt_target_state(self, rule: str) -> None:
        """After a known finding: the spec takes the target's free queue and reference
        counts, if the target shows both and they keep the spec's invariants; else
        :class:`ExpectedEnd`."""
        view = self.target.view()
        if view.free_queue is None or view.ref_cnt is None:
            raise ExpectedEnd(f"known finding {rule}: the target's state is not shown")
        adopted = replace(
            self.state, free_queue=tuple(view.free_queue), ref_cnt=tuple(view.ref_cnt)
        )
        still = compare_views(adopted, view, self.level.exact_order)
        if broken_invariants(adopted) or still:
            raise ExpectedEnd(f"known finding {rule}: the spec cannot take the target's state")
        self.state = self.checked = adopted

    def judge(self, action: Action) -> Observation | None:
        """One step of :meth:`apply`, every difference raised."""
        self.record.trace.append(action)
        self.record.steps += 1
        self.record.operations[action.operation] += 1
        expected_violation = violation(self.state, action)
        self.last = Outcomes(expected_violation, None)
        before = self.target.view() if expected_violation else None
        if self.events is not None and not isinstance(action, TakeEvents):
            plan_ahead(self.target, (action, TAKE))  # the events it publishes next
        try:
            actual = self.target.apply(action)
        except Exception as exc:  # the pool refused; whether it may is judged here
            self.last = Outcomes(expected_violation, exc)
            self.refused(action, expected_violation, before, exc)
            return None
        except (SystemExit, KeyboardInterrupt) as exc:  # the target tried to end the process
            if isinstance(exc, KeyboardInterrupt) and interrupted_by_user():
                raise
            raise Nonconformance(
                f"{action.operation} ended the process: {type(exc).__name__}"
                f"({exc}) raised by the target (never a refusal)"
            ) from exc
        self.last = Outcomes(expected_violation, actual)
        if expected_violation is not None:
            raise Nonconformance(
                f"{action.operation} was accepted although it breaks the "
                f"contract: {expected_violation}"
            )
        taken, stream_fault = self.judge_events(action, actual)
        before_state = self.state
        try:
            expected = self.judge_step(action, actual)
        except Nonconformance as exc:
            if stream_fault is None:
                raise
            # the root first: the pool's own state (its index, its blocks) disagrees with
            # the spec, and the stream that follows from that state is wrong with it
            raise Nonconformance(
                f"{exc}; which explains the events finding that follows from it: {stream_fault}"
            ) from exc
        if stream_fault is not None:
            raise Nonconformance(stream_fault)
        if taken is not None:
            self.settle_events(action, taken)
        # counted one by one: ``Counter.update`` first asks whether it was given a mapping,
        # an abstract-class check that cost more than the counting, after every step
        reached = self.record.situations
        for situation in situations(before_state, action, self.state, expected):
            reached[situation] += 1
        met = self.record.cells
        for cell in cells(before_state, action, expected):
            met[cell] += 1
        return expected

    def judge_step(self, action: Action, actual: Observation) -> Observation:
        """The spec takes the step (adopting the target's choice of blocks where the order
        is free); the target's result, view and structure must agree with it. Returns what
        the spec expected."""
        before = self.state  # its invariants were checked when it was reached
        if not self.level.exact_order:
            self.adopt(action, actual.result)
        self.state, expected = spec_step(self.state, action)
        self.last = Outcomes(expected, actual)
        problems = compare_observation(action, expected, actual, self.target.observes)
        if problems:
            raise differences("", problems)
        self.check_view(f"after {action.operation}")
        self.check_structure(action)
        if self.state is not before:  # a query leaves the spec's state as it was
            check_spec_invariants(broken_since(self.checked, self.state), "after a step")
            self.checked = self.state
        return expected

    def judge_events(
        self, action: Action, actual: Observation
    ) -> tuple[tuple[Observation, bool] | None, str | None]:
        """The events level: take the target's events (the action's own, when it took
        them), feed them to the consumer and judge them against the target's keys. Returns
        what was taken (``None`` at other levels) with whether the target's keys were known,
        and what the consumer found wrong (``None``: nothing). What it found is reported
        after the rest of the step is compared: a pool whose own state is wrong publishes
        a stream that follows from it, and the state is the root to report."""
        if self.events is None:
            return None, None
        taken = actual if isinstance(action, TakeEvents) else self.target.apply(TakeEvents())
        residency = target_residency(self.target.view(), self.state.profile)
        events = taken_events(taken.result, self.state.profile)
        found = self.events.feed(events, residency)
        fault = self.events.finding(found[0], action.operation, events) if found else None
        return (taken, residency is not None), fault

    def settle_events(self, action: Action, taken: tuple[Observation, bool]) -> None:
        """The spec takes its events too, and they must be the target's; without the
        target's keys the consumer is compared with the spec's pool; a router is then
        asked about every prefix, against what a lookup on the spec's pool hits."""
        assert self.events is not None
        observed, keys_known = taken
        events = taken_events(observed.result)
        if not isinstance(action, TakeEvents):
            self.state, expected = spec_step(self.state, TakeEvents())
            problems = compare_observation(TakeEvents(), expected, observed, self.target.observes)
            if problems:
                raise Nonconformance(f"after {action.operation}: " + "; ".join(problems))
        if not keys_known:
            cleared = any(isinstance(e, AllBlocksCleared) for e in events)
            found = self.events.against_spec(self.state, cleared)
            if found:
                message = self.events.finding(found[0], action.operation, events)
                raise Nonconformance(message)
        if self.events.is_router:
            found = self.events.routes_on_spec(self.state)
            if found:
                message = self.events.finding(found[0], action.operation, events)
                raise Nonconformance(message)

    def refused(
        self, action: Action, expected: ContractViolation | None, before: Any, exc: Exception
    ) -> None:
        """The target raised ``exc`` on ``action``: a refusal the spec expects (``expected``)
        counts only if the target raised it (its own code, its declared refusal value, or
        its surface refusing the call), never when kvpool's own code failed."""
        if expected is None:
            fault = fault_of(exc)
            if fault == "mismatch":  # the suite called the pool the way it does not take
                raise SurfaceMismatch(
                    f"{action.operation}: the suite's call into the target failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if fault == "suite":
                raise exc
            raise Nonconformance(
                f"{action.operation} was refused although it is allowed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if (
            not isinstance(exc, ContractViolation)  # the spec target's own refusal
            and innermost_in_kvpool(exc)
            and fault_of(exc) == "suite"
        ):
            raise exc  # kvpool's own exception: a bug of the suite, not the target's refusal
        changes = view_changes(before, self.target.view())
        if changes:
            raise Nonconformance(
                f"{action.operation} was refused (rule '{expected.rule}') but "
                f"the pool changed: " + "; ".join(changes)
            ) from exc
        self.record.refusals[expected.rule] += 1
        self.check_structure(action)

    def adopt(self, action: Action, result: Any) -> None:
        """Set semantics: accept the target's choice of blocks if it is a legal choice."""
        if not isinstance(action, GetNewBlocks | PeerGetNewBlocks):
            return
        pool = self.state if isinstance(action, GetNewBlocks) else self.state.peer
        assert pool is not None
        got = tuple(result) if isinstance(result, tuple) else ()
        if len(got) != action.num_blocks:
            raise Nonconformance(
                f"{action.operation}({action.num_blocks}) handed out {len(got)} blocks: {list(got)}"
            )
        for b in got:
            if got.count(b) > 1:
                raise Nonconformance(f"{action.operation} handed out block {b} twice")
            if not pool.in_range(b) or b not in pool.free:
                refs = pool.ref_cnt[b] if pool.in_range(b) else "?"
                raise Nonconformance(
                    f"{action.operation} handed out block {b}, which is not free (ref_cnt {refs})"
                )
        self.state = adopt_allocation(self.state, got, peer=isinstance(action, PeerGetNewBlocks))

    def check_view(self, where: str) -> None:
        problems = compare_views(self.state, self.target.view(), self.level.exact_order)
        if problems:
            raise differences(f"{where}: ", problems)

    def check_structure(self, action: Action) -> None:
        problems = self.target.structure_problems()
        if problems:
            raise differences(f"after {action.operation}: free list corrupted: ", problems)


def plan_ahead(target: Target, actions: Sequence[Action]) -> None:
    """Tell a target that takes several actions at once (one with :data:`PLAN`: the wire
    protocol's batches) which actions the runner applies next; each still comes by
    ``apply``, and the runner may leave some out. Actions said before that begin
    ``actions`` (or that ``actions`` begin) are kept."""
    plan = getattr(target, PLAN, None)
    if plan is not None:
        plan(actions)


def run_config(level: Level, config: PoolConfig) -> PoolConfig:
    """The config a run at ``level`` builds its target with (the events level: events on)."""
    if level.consumer is not None and not config.enable_kv_cache_events:
        return replace(config, enable_kv_cache_events=True)
    return config


def sent_actions(level: Level, actions: Sequence[Action]) -> Sequence[Action]:
    """What a run at ``level`` sends the target for ``actions``: at the events level each
    followed by the ``take_events`` the run sends after it."""
    if level.consumer is None:
        return actions
    return [
        sent
        for action in actions
        for sent in ((action,) if isinstance(action, TakeEvents) else (action, TAKE))
    ]


#: How many replays after the one run :func:`replay_each` says to the factory.
REPLAYS_AHEAD = 8


class Replay(NamedTuple):
    """One sequence of a :func:`replay_each`: its profile, level, config and actions."""

    profile: Profile
    level: Level
    config: PoolConfig
    actions: Sequence[Action]


def replay_each(
    factory: TargetFactory, replays: Sequence[Replay]
) -> Iterator[tuple[str | None, list[Action]]]:
    """:func:`replay` of each of ``replays`` in turn, on fresh targets. A factory with
    :data:`~.target.PLAN_NEXT` is told each, and the next :data:`REPLAYS_AHEAD`, before
    it is run, so that a program can compute them while this one is judged (the results are
    the same)."""
    plan_next = getattr(factory, PLAN_NEXT, None)
    said = 0  # how many replays were said
    for number, one in enumerate(replays):
        while plan_next is not None and said < min(len(replays), number + 1 + REPLAYS_AHEAD):
            after = replays[said]
            config = run_config(after.level, after.config)
            plan_next(config, after.profile, sent_actions(after.level, after.actions))
            said += 1
        yield replay(factory, one.profile, one.level, one.config, one.actions)


def replay(
    factory: TargetFactory,
    profile: Profile,
    level: Level,
    config: PoolConfig,
    actions: Sequence[Action],
    skip_out_of_contract: bool = False,
) -> tuple[str | None, list[Action]]:
    """Run ``actions`` in lockstep on a fresh target.

    Returns the first difference (``None`` if the target conforms) and the actions actually
    run. With ``skip_out_of_contract``, actions the spec would refuse at their turn (and
    actions this target cannot take) are left out instead of run — the shrinker uses this
    when dropping an earlier action makes a later one meaningless.
    """
    run = LockstepRun(factory, profile, level, config, first=actions)

    def skip(action: Any) -> bool:
        return skip_out_of_contract and (
            not run.can_apply(action)
            or (not level.out_of_contract and violation(run.state, action) is not None)
            or (level.consumer is not None and not manager_could_call(run.state, action))
        )

    return replay_actions(run.apply, actions, skip)


def replay_actions(
    apply: Callable[[Any], object], actions: Sequence[Any], skip: Callable[[Any], bool]
) -> tuple[str | None, list[Any]]:
    """Apply ``actions`` in turn, leaving out those ``skip`` says; the first difference
    (``None`` if there is none) and the actions actually applied."""
    done: list[Any] = []
    for action in actions:
        if skip(action):
            continue
        done.append(action)
        try:
            apply(action)
        except Nonconformance as exc:
            return str(exc), done
        except ExpectedEnd:  # a known finding ended the run: no difference
            return None, done
        except Exception as exc:  # the adapter, the target or the spec failed
            return f"{type(exc).__name__}: {exc}", done
    return None, done
