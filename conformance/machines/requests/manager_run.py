"""One request-level run: a manager under test beside the spec's manager.

Each request action goes to the target as the calls of its protocol, with the engine's
copies and writes made (and guarded) in between; the request-level properties are checked
on what the target shows; then the spec's manager takes the same action and the results
and the pools must agree exactly (block tables name blocks, so the order matters).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import cast

from kvpool.spec import (
    Action,
    AllBlocksCleared,
    BlockStored,
    ContractViolation,
    Event,
    Observation,
    PoolState,
    Profile,
    TakeEvents,
    canonical_events,
    initial_state,
    pool_residency,
)
from kvpool.spec.consumer import EventViolation
from kvpool.spec.events import as_consumers_read
from kvpool.spec.manager import (
    INCREMENTAL,
    Admit,
    ManagerResult,
    ManagerState,
    RequestAction,
    Scheduled,
    SpecPool,
    apply_request,
    initial_manager_state,
    request_violation,
    resent_events,
)

from ...consumers.judge import StreamJudge
from ..pool.compare import compare_views
from ..pool.lockstep import Nonconformance, RunRecord
from ..pool.target import PoolView
from . import operations
from .checks import RequestChecks
from .coverage import request_situations
from .pool_run import ANSWERS, QUERIES
from .target import ManagerTarget, ManagerTargetFactory, RequestSetup


def show(result: ManagerResult) -> str:
    if isinstance(result, Scheduled):
        copies = f", copies {list(result.copies)}" if result.copies else ""
        tables = " | ".join(str(list(t)) for t in result.tables)
        return f"{result.num_computed_tokens} tokens computed, tables {tables}{copies}"
    return repr(result)


class AnsweringSpecPool(SpecPool):
    """The spec's pool under the target's profile, answering the questions the spec's
    manager asks (``is_block_writable``, ...) when that profile's API lacks them: a
    release's manager never asks them, but the spec's manager is the same program for
    every release."""

    def __call__(self, action: Action) -> Observation:
        try:
            return super().__call__(action)
        except ContractViolation as exc:
            if exc.rule != "unsupported-action" or not isinstance(action, QUERIES):
                raise
            return ANSWERS[type(action)](self.state, action)[1]


class ManagerRun:
    """The spec's manager and a fresh manager under test, compared after every action."""

    def __init__(
        self,
        factory: ManagerTargetFactory,
        profile: Profile,
        setup: RequestSetup,
        record: RunRecord | None = None,
    ) -> None:
        # a manager that can only be built for some setups says how it builds the others
        setup = getattr(factory, "fit_setup", lambda drawn: drawn)(setup)
        self.record = record if record is not None else RunRecord()
        self.record.trace = []
        self.record.config = setup
        self.setup = setup
        self.pool_state: PoolState = initial_state(setup.pool, profile)
        self.state: ManagerState = initial_manager_state(
            setup.manager,
            setup.pool,
            profile.key_attributes,
            window_unkeyed_free_first=profile.window_unkeyed_free_first,
        )
        self.target: ManagerTarget = factory(setup, profile)
        self.checks = RequestChecks(setup, self.record.properties, profile.key_attributes)
        #: The latest action's results: the spec's and the target's (or its exception).
        self.last: tuple[ManagerResult, ManagerResult | Exception] = (None, None)
        #: The one judge of streams, fed the manager's pool's events (the count model: the
        #: contract the spec's pool keeps); the spec's own events are compared exactly after.
        self.stream_judge = StreamJudge("count", setup.manager.parent_known_groups())
        #: The copies the stream's re-sent stores added (requests in the ``"full"`` report
        #: mode), which no removal answers: a count consumer holds them beside the pool's.
        self.resent_copies: Counter[tuple[int, bytes]] = Counter()
        self.check_pool("after construction")

    def allows(self, action: RequestAction) -> bool:
        """Whether the manager under test takes ``action`` (every one, unless its
        ``allows`` says otherwise: an older API without ``evict_blocks``, say); a request
        in a report mode it does not take (:attr:`report_modes_taken`) never."""
        mode = action.report_mode if isinstance(action, Admit) else INCREMENTAL
        if mode != INCREMENTAL and mode not in self.report_modes_taken:
            return False
        allows = getattr(self.target, "allows", None)
        return True if allows is None else bool(allows(action))

    @property
    def report_modes_taken(self) -> frozenset[str]:
        """The report modes the manager under test takes with a request (its
        ``report_modes_taken``; the default one unless it says so): the only ones drawn."""
        return frozenset(getattr(self.target, "report_modes_taken", frozenset()))

    @property
    def extra_keys_taken(self) -> frozenset[str]:
        """The attributes besides the salt the manager under test takes with a request
        (its ``extra_keys_taken``; none unless it says so): the only ones drawn."""
        return frozenset(getattr(self.target, "extra_keys_taken", frozenset()))

    def apply(self, action: RequestAction) -> ManagerResult:
        """Run ``action`` on both; raise :class:`Nonconformance` on any difference.

        Returns the result both gave."""
        actual = self.run_on_target(action)
        before = self.state
        pool = AnsweringSpecPool(self.pool_state)
        self.state, expected = apply_request(pool, self.state, action)
        self.pool_state = pool.state
        self.record.situations.update(request_situations(before, action, self.state, expected))
        self.last = (expected, actual)
        if actual != expected:
            raise Nonconformance(
                f"{action.operation}({action.request_id!r}): expected {show(expected)}, "
                f"got {show(actual)}"
            )
        view = self.check_pool(f"after {action.operation}")
        self.check_events(f"after {action.operation}")
        self.checks.step_done(view, actual if isinstance(actual, bool) else None)
        return actual

    def check_events(self, where: str) -> None:
        """The KV events the manager's pool published during the step: judged as a stream
        (:class:`~kvpool.conformance.consumers.judge.StreamJudge`, against the spec's
        pool's keys), then compared with the spec's pool's own events; when events are on
        and the target offers ``take_events`` (in the spec's vocabulary and keys; ``None``
        when it cannot say) and the profile publishes them."""
        take = getattr(self.target, "take_events", None)
        if take is None or not self.setup.pool.enable_kv_cache_events:
            return
        pool = SpecPool(self.pool_state)
        try:
            published = pool(TakeEvents()).result
        except ContractViolation:  # a profile whose pool publishes no events
            return
        actual: tuple[Event, ...] | None = take()
        if actual is None:
            return
        self.pool_state = pool.state
        assert isinstance(published, tuple)
        # the stores re-sent at the lookup come before anything the pool did after it
        expected = resent_events(self.pool_state, self.state.resent) + published
        # read as the profile's consumers read them (``coarse_events_name_fine_hash``)
        as_fine = self.pool_state.profile.coarse_events_name_fine_hash
        expected = as_consumers_read(cast("tuple[Event, ...]", expected), as_fine)
        actual = as_consumers_read(actual, as_fine)
        differ = canonical_events(expected) != canonical_events(actual)
        # the judge's truth counts the copies the spec re-sent: a stream that re-sent
        # other stores is shown as the difference it is
        if differ and self.state.resent:
            raise Nonconformance(
                f"{where}: KV events differ: expected {list(expected)}, got {list(actual)}"
            )
        found = self.stream_judge.feed(actual, self.residency(expected))
        if found:
            operation = where.removeprefix("after ")
            raise Nonconformance(self.stream_judge.finding(self.told(found[0]), operation, actual))
        if differ:
            raise Nonconformance(
                f"{where}: KV events differ: expected {list(expected)}, got {list(actual)}"
            )

    def residency(self, expected: tuple[Event, ...]) -> dict[tuple[int, bytes], int]:
        """What a count consumer of the spec's stream holds: the spec's pool's keys, plus a
        copy for every hash a re-sent store named since the last reset (``expected``: the
        step's events, re-sent stores first)."""
        if any(isinstance(e, AllBlocksCleared) for e in expected):
            self.resent_copies.clear()
        for store in expected[: len(self.state.resent)]:
            assert isinstance(store, BlockStored)
            self.resent_copies.update((store.group_id, h) for h in store.block_hashes)
        held = Counter(pool_residency(self.pool_state))
        held.update(self.resent_copies)
        return dict(held)

    def told(self, violation: EventViolation) -> EventViolation:
        """``violation`` saying how many of the copies it counts for the pool were re-sent
        stores (the truth of :meth:`residency`), where any were."""
        h, group = violation.block_hash, violation.group_id
        resent = self.resent_copies.get((group, h), 0) if h is not None and group is not None else 0
        if not resent:
            return violation
        note = f" ({resent} of the pool's copies counted are re-sent stores no removal answers)"
        return replace(violation, message=violation.message + note)

    def run_on_target(self, action: RequestAction) -> ManagerResult:
        """Record ``action`` and drive the target with it (the draw must be inside the
        contract); what the target answered, also kept in ``last``."""
        self.record.trace.append(action)
        self.record.steps += 1
        self.record.operations[action.operation] += 1
        problem = request_violation(self.state, action)
        if problem is not None:
            raise ValueError(f"the suite drew an action outside the contract: {problem}")
        self.last = (None, None)
        try:
            actual = self.drive(action)
        except Exception as exc:
            self.last = (None, exc)
            raise
        self.last = (None, actual)
        return actual

    def check_pool(self, where: str) -> PoolView:
        view = self.target.view()
        problems = compare_views(self.pool_state, view, exact_order=True)
        problems += [f"free list corrupted: {p}" for p in self.target.structure_problems()]
        if problems:
            raise Nonconformance(f"{where}: " + "; ".join(problems))
        return view

    # --- the target side: protocol calls, engine copies and writes, property checks ------

    def drive(self, action: RequestAction) -> ManagerResult:
        """The calls of ``action`` on the target, checked (its record's ``checked`` drive in
        the request table)."""
        return operations.named(action.operation).checked(self, action)

    def make_copies(self, rid: str, copies: tuple[tuple[int, int], ...]) -> None:
        """The engine copies data for a copy-on-write, into blocks that must be writable."""
        if not copies:
            return
        view = self.target.view()
        for src, dst in copies:
            self.checks.guard(
                rid, dst, self.target.is_block_writable(dst), view, f"copy of block {src}"
            )
            self.checks.copy(src, dst)

    def copied(
        self,
        rid: str,
        result: Scheduled,
        fresh: bool,
        kept: int | None = None,
        cached: int | None = None,
    ) -> Scheduled:
        self.make_copies(rid, result.copies)
        self.target.copies_done(rid)
        view = self.target.view()
        self.checks.scheduled(rid, result, view, fresh=fresh, kept=kept, cached=cached)
        return result

    def compute(self, rid: str, cache_partial: bool) -> Scheduled | None:
        t, checks = self.target, self.checks
        prepared = t.prepare_write(rid)
        if prepared is None:
            return None
        self.make_copies(rid, prepared.copies)
        t.copies_done(rid)
        request = checks.requests[rid]
        bs = self.setup.manager.block_size
        start, end = request.num_computed_tokens, len(request.tokens)
        if start < end:
            view = t.view()
            for g, table in enumerate(prepared.tables):
                for i in range(start // bs, (end - 1) // bs + 1):
                    block = table[i] if i < len(table) else -1
                    first, last = max(start, i * bs), min(end, (i + 1) * bs) - 1
                    what = f"write of group {g} tokens {first}..{last}"
                    writable = block >= 0 and t.is_block_writable(block)
                    checks.guard(rid, block, writable, view, what)
                    checks.write(rid, block, i)
        final = t.commit(rid, cache_partial)
        result = Scheduled(final.num_computed_tokens, final.tables, prepared.copies)
        checks.scheduled(rid, result, t.view(), fresh=False)
        return result
