"""The spec's manager driving a plain pool under test through realistic request sequences.

Each request action runs as the spec manager's program of pool calls; every call goes
through a pool-level :class:`~kvpool.conformance.machines.pool.lockstep.LockstepRun`, so the
pool under test is compared with the spec's pool call by call (at the ``safety`` level: the spec
adopts the blocks the pool hands out, and the manager's tables follow). The request-level
properties are then checked on what the pool under test shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kvpool.spec import (
    Action,
    GetNumFreeBlocks,
    IsBlockWritable,
    Observation,
    PoolState,
    Profile,
    queries,
)
from kvpool.spec.manager import (
    Admit,
    Append,
    Broken,
    Compute,
    EvictCached,
    Finish,
    ManagerResult,
    ManagerState,
    Preempt,
    RequestAction,
    RequestState,
    ResetCache,
    Resume,
    Scheduled,
    apply_request,
    initial_manager_state,
    request_violation,
)

from ..pool.levels import SAFETY, Level
from ..pool.lockstep import LockstepRun, Nonconformance, RunRecord
from ..pool.surface import SurfaceMismatch
from ..pool.target import TargetFactory
from .checks import PropertyBroken, RequestChecks
from .coverage import request_situations
from .target import RequestSetup

#: Without these a pool cannot serve requests at all.
ESSENTIAL = frozenset({"get_new_blocks", "free_blocks"})
#: The prefix cache: without all of them the run keeps caching off.
CACHING = frozenset({"touch", "get_cached_block", "cache_full_blocks"})
#: Partial entries, and the running copy-on-write that protects them.
PARTIAL = frozenset({"cache_partial_block", "move_block_hashes", "is_block_writable"})
#: Questions the spec can answer alone when the pool has no such method.
QUERIES = (IsBlockWritable, GetNumFreeBlocks)
ANSWERS: dict[type[Action], Callable[[PoolState, Any], tuple[PoolState, Observation]]] = {
    IsBlockWritable: queries.is_block_writable,
    GetNumFreeBlocks: queries.get_num_free_blocks,
}


class PoolRequestRun:
    """Request actions, run by the spec's manager on a pool under test."""

    #: The attributes besides the salt drawn for its requests: none by default (a pool
    #: sees only the hashes); the spec's manager takes them all.
    extra_keys_taken: frozenset[str] = frozenset()

    def __init__(
        self,
        factory: TargetFactory,
        profile: Profile,
        setup: RequestSetup,
        record: RunRecord | None = None,
        level: Level = SAFETY,
    ) -> None:
        self.record = record if record is not None else RunRecord()
        self.record.trace = []
        self.record.config = setup
        #: The pool-level lockstep keeps its own record: the trace here is request actions.
        self.pool_record = RunRecord()
        if not profile.has_hash_block_size or profile.coarse_hash_concatenates:
            # such a release keys a block by hashes at block_size (or their concatenation),
            # which the manager's lookups by the last fine hash only meet at equal sizes
            block_size = setup.manager.block_size
            setup = replace(setup, pool=replace(setup.pool, hash_block_size=block_size))
            self.record.config = setup
        self.lockstep = LockstepRun(factory, profile, level, setup.pool, self.pool_record)
        offered = self.lockstep.operations
        if not offered >= CACHING and setup.pool.enable_caching:
            # a pool without the prefix-cache API is driven with caching off
            setup = replace(setup, pool=replace(setup.pool, enable_caching=False))
            self.record.config = setup
            self.lockstep = LockstepRun(factory, profile, level, setup.pool, self.pool_record)
        self.setup = setup
        if self.lockstep.events is not None:
            self.lockstep.events.parent_known = setup.manager.parent_known_groups()
        missing = ESSENTIAL - self.lockstep.operations
        if missing:
            raise SurfaceMismatch(
                f"the pool lacks {', '.join(sorted(missing))}: the request machine needs them"
            )
        self.state: ManagerState = initial_manager_state(setup.manager, setup.pool)
        self.checks = RequestChecks(setup, self.record.properties)

    def allows(self, action: RequestAction) -> bool:
        """Whether this pool's API can carry ``action`` (partial entries and the reset are
        optional)."""
        ops = self.lockstep.operations
        if isinstance(action, Compute) and action.cache_partial:
            return ops >= PARTIAL
        if isinstance(action, ResetCache):
            return "reset_prefix_cache" in ops
        if isinstance(action, EvictCached):
            return "evict_blocks" in ops
        return True

    def call(self, action: Action) -> Observation:
        """One pool call of the manager's program, in lockstep. A question the pool cannot
        answer (an older API) is answered by the spec alone."""
        if action.operation not in self.lockstep.operations and isinstance(action, QUERIES):
            # not through step(): a profile without the method would refuse the question
            return ANSWERS[type(action)](self.lockstep.state, action)[1]
        try:
            expected = self.lockstep.apply(action)
        except Nonconformance as exc:
            if isinstance(action, IsBlockWritable):
                raise PropertyBroken(
                    [Broken("write-guard", f"before a write: {exc}", None, action.block)]
                ) from exc
            raise
        if expected is None:
            raise AssertionError(f"the spec's manager made an out-of-contract call {action}")
        if isinstance(action, IsBlockWritable):
            self.checks.checked["write-guard"] += 1
        return expected

    def apply(self, action: RequestAction) -> ManagerResult:
        """Run ``action`` through the spec's manager on the pool under test; its result."""
        self.record.trace.append(action)
        self.record.steps += 1
        self.record.operations[action.operation] += 1
        problem = request_violation(self.state, action)
        if problem is not None:
            raise ValueError(f"the suite drew an action outside the contract: {problem}")
        checks, target = self.checks, self.lockstep.target
        rid = action.request_id
        kept = checks.kept_blocks(rid, target.view()) if isinstance(action, Resume) else None
        cached = None
        if isinstance(action, Admit):
            # what the pool holds of the new request's prefix, for keys-shared: the pool's
            # lookups must serve it to the spec's manager
            checks.admitted(rid, action.tokens, action.salt, action.extra)
            cached = checks.cached_prefix(rid, target.view())
        before = self.state
        self.state, result = apply_request(self.call, self.state, action)
        self.record.situations.update(request_situations(before, action, self.state, result))
        view = target.view()
        match action:
            case Admit() if result is None:
                del checks.requests[rid]
            case Append(tokens=tokens) if result is not None:
                checks.appended(rid, tokens)
            case Preempt() | Finish():
                checks.released(rid, view, finished=isinstance(action, Finish))
        if isinstance(result, Scheduled):
            fresh = isinstance(action, Admit | Resume)
            for src, dst in result.copies:
                checks.copy(src, dst)
            checks.scheduled(rid, result, view, fresh, self.state.contents, kept, cached)
            if isinstance(action, Compute):
                self.wrote(rid, before.requests[rid], result)
        checks.step_done(view, result if isinstance(result, bool) else None)
        return result

    def wrote(self, rid: str, before: RequestState, result: Scheduled) -> None:
        """The spec's manager wrote the request's pending tokens into the tables it had
        before the pass (a sliding window may null some of them after): note who wrote
        each block, what ``keys-partitioned`` judges a later hit by."""
        checks = self.checks
        bs = self.setup.manager.block_size
        signature = checks.requests[rid].signature
        start, end = before.num_computed_tokens, len(before.tokens)
        for table in before.tables:
            for i in range(start // bs, -(-end // bs)):
                if i < len(table) and table[i]:
                    checks.origin[table[i]] = signature
