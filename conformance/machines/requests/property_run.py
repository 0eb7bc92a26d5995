"""A request-level run of a manager whose policy the spec's manager does not model.

Some managers make other by-design choices than the spec's (a hit covering the whole
prompt, keys registered when a block is scheduled, no null block): beside the spec's
manager every step would differ. Such a manager target says ``checked_by_properties``;
its run drives it with the same request actions, the engine's copies and writes made and
guarded in between, and judges it by the request-level properties alone (the contract a
scheduler depends on) plus its own structure checks. The requests it has (and whether each
runs) are tracked from its answers, so drawing follows the manager under test.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvpool.spec import PoolState, Profile, initial_state
from kvpool.spec.manager import (
    Admit,
    Append,
    Compute,
    Finish,
    ManagerResult,
    Preempt,
    RequestAction,
    RequestState,
    Resume,
    Scheduled,
)
from kvpool.spec.state import PrimaryKey

from ...consumers.judge import StreamJudge
from ..events.check import taken_events
from ..pool.lockstep import Nonconformance, RunRecord
from ..pool.target import PoolView
from .capabilities import declared_by
from .manager_run import ManagerRun
from .target import ManagerTargetFactory, RequestSetup


def checked_by_properties(factory: Any) -> bool:
    """Whether managers from ``factory`` are judged by the properties alone."""
    return bool(getattr(factory, "checked_by_properties", False))


class PropertyRun(ManagerRun):
    """A manager under test, judged by the request-level properties (no spec manager)."""

    def __init__(
        self,
        factory: ManagerTargetFactory,
        profile: Profile,
        setup: RequestSetup,
        record: RunRecord | None = None,
        consumer: str | None = None,
    ) -> None:
        narrow = getattr(factory, "supported_setup", None)
        super().__init__(factory, profile, narrow(setup) if narrow else setup, record)
        #: The consumer judging the manager's own KV events, if asked for.
        self.events: StreamJudge | None = None
        if consumer is not None:
            if not callable(getattr(self.target, "take_events", None)):
                raise ValueError(f"manager {self.target.name!r} publishes no KV events")
            self.events = StreamJudge(consumer, self.setup.manager.parent_known_groups())
            self.judge_events("construction")
        self.checks.declared = declared_by(self.target)
        self.checks.keys_within_pass = profile.scheduled_keys_within_pass

    def allows(self, action: RequestAction) -> bool:
        """As :meth:`ManagerRun.allows`; and where keys registered at scheduling are safe
        within one forward pass, no request leaves while another reads a block its pass is
        still to write (such a scheduler runs both in that one pass)."""
        if isinstance(action, Preempt | Finish) and self.checks.strands_a_pass(action.request_id):
            return False
        return super().allows(action)

    def apply(self, action: RequestAction) -> ManagerResult:
        actual = self.run_on_target(action)
        self.follow(action, actual)
        if self.events is not None:
            self.judge_events(action.operation)
        view = self.check_pool(f"after {action.operation}")
        self.checks.step_done(view, actual if isinstance(actual, bool) else None)
        return actual

    def judge_events(self, operation: str) -> None:
        """The events the manager published since the last step, fed to the consumer and
        compared with what it holds in the same terms (its ``event_residency``); the stream
        is judged before anything else of the step."""
        assert self.events is not None
        target: Any = self.target
        events = taken_events(target.take_events())
        residency = target.event_residency() if hasattr(target, "event_residency") else None
        found = self.events.feed(events, residency)
        if not found and residency is not None and self.events.is_router:
            found = self.events.routes_on_residency(residency)
        self.record.properties.update(self.events.checked)
        self.events.checked.clear()
        if found:
            raise Nonconformance(self.events.finding(found[0], operation, events))

    def follow(self, action: RequestAction, result: ManagerResult) -> None:
        """Track the requests as the manager under test answered."""
        requests = dict(self.state.requests)
        rid = action.request_id
        scheduled = result if isinstance(result, Scheduled) else None
        match action:
            case Admit(tokens=tokens, salt=salt, extra=extra) if scheduled is not None:
                groups = len(scheduled.tables)
                requests[rid] = RequestState(
                    rid,
                    tokens,
                    salt,
                    True,
                    scheduled.tables,
                    scheduled.num_computed_tokens,
                    (0,) * groups,
                    extra,
                )
            case Resume() | Compute() if scheduled is not None:
                requests[rid] = replace(
                    requests[rid],
                    running=True,
                    tables=scheduled.tables,
                    num_computed_tokens=scheduled.num_computed_tokens,
                )
            case Append(tokens=tokens) if scheduled is not None:
                request = requests[rid]
                requests[rid] = replace(
                    request, tokens=request.tokens + tokens, tables=scheduled.tables
                )
            case Preempt():
                request = requests[rid]
                requests[rid] = replace(
                    request,
                    running=False,
                    tables=((),) * len(request.tables),
                    num_computed_tokens=0,
                )
            case Finish():
                del requests[rid]
        self.state = replace(self.state, requests=requests)

    def check_pool(self, where: str) -> PoolView:
        view = self.target.view()
        self.pool_state = self.mirror(view)
        problems = self.target.structure_problems()
        if problems:
            raise Nonconformance(f"{where}: " + "; ".join(problems))
        return view

    def mirror(self, view: PoolView) -> PoolState:
        """The target's pool as a spec state (for traces: there is no spec pool here):
        its free queue, ref counts and keys, as far as it shows them."""
        state = initial_state(self.setup.pool, self.pool_state.profile)
        n = state.num_blocks
        keys = view.keys or ()
        primary = tuple(
            PrimaryKey(min(k), self.setup.manager.block_size)
            if b < len(keys) and (k := keys[b])
            else None
            for b in range(n)
        )
        return replace(
            state,
            free_queue=view.free_queue if view.free_queue is not None else state.free_queue,
            ref_cnt=view.ref_cnt if view.ref_cnt is not None else state.ref_cnt,
            primary=primary,
        )
