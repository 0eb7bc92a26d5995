"""The lockstep machine: the spec and a target, driven by one stream of actions.

Each Hypothesis rule draws one kind of action from the spec's current state, applies it to
both, and compares results, watcher firings and everything the target shows of its state.
A difference raises :class:`Nonconformance`; Hypothesis then shrinks the action sequence,
and the last run (the shrunk one) is kept in :class:`RunRecord` for the report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from kvpool.spec import (
    Action,
    FreeBlocks,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    PeerGetNewBlocks,
    PoolState,
    Profile,
    ResetPrefixCache,
    TakeEvents,
    adopt_allocation,
    broken_invariants,
    initial_state,
    step,
    violation,
)

from . import draw
from .compare import compare_observation, compare_views, view_changes
from .coverage import situations
from .levels import Level
from .target import EVICT_FIRST, Target, TargetFactory

#: How often each operation is drawn, relative to the others: the ones that build state
#: (allocate, cache, free, hit) more than the queries.
WEIGHTS: dict[str, int] = {
    "get_new_blocks": 6,
    "free_blocks": 4,
    "touch": 4,
    "unpin_blocks": 1,
    "cache_full_blocks": 5,
    "cache_partial_block": 2,
    "get_cached_block": 3,
    "evict_blocks": 1,
    "move_block_hashes": 1,
    "is_block_writable": 1,
    "peer_get_new_blocks": 1,
    "reset_prefix_cache": 1,
    "get_usage": 1,
    "get_num_free_blocks": 1,
    "take_events": 2,
}


def _query(action: Action) -> draw.Drawer:
    return lambda data, state, ctx: action


DRAWERS: dict[str, draw.Drawer] = {
    "get_new_blocks": draw.draw_get_new_blocks,
    "free_blocks": draw.draw_free_blocks,
    "touch": draw.draw_touch,
    "unpin_blocks": draw.draw_unpin_blocks,
    "cache_full_blocks": draw.draw_cache_full_blocks,
    "cache_partial_block": draw.draw_cache_partial_block,
    "get_cached_block": draw.draw_get_cached_block,
    "evict_blocks": draw.draw_evict_blocks,
    "move_block_hashes": draw.draw_move_block_hashes,
    "is_block_writable": draw.draw_is_block_writable,
    "peer_get_new_blocks": draw.draw_peer_get_new_blocks,
    "reset_prefix_cache": _query(ResetPrefixCache()),
    "get_usage": _query(GetUsage()),
    "get_num_free_blocks": _query(GetNumFreeBlocks()),
    "take_events": _query(TakeEvents()),
}


class Nonconformance(AssertionError):
    """The target did something the spec does not allow."""


@dataclass
class RunRecord:
    """What the runs of one level saw, shared by every machine instance of that level."""

    examples: int = 0
    steps: int = 0
    operations: Counter[str] = field(default_factory=Counter)
    situations: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    #: The actions of the latest test case (after a failure: the shrunk one).
    trace: list[Action] = field(default_factory=list)
    config: Any = None
    on_example: Any = None


def lockstep_machine(
    factory: TargetFactory, profile: Profile, level: Level, max_blocks: int, record: RunRecord
) -> type[RuleBasedStateMachine]:
    """A machine class comparing targets from ``factory`` with the spec."""

    class Lockstep(RuleBasedStateMachine):
        state: PoolState
        target: Target

        def __init__(self) -> None:
            super().__init__()
            record.examples += 1
            record.trace = []
            if record.on_example is not None:
                record.on_example(record)

        @initialize(config=draw.configs(max_blocks, level.out_of_contract))
        def build(self, config: Any) -> None:
            record.config = config
            self.state = initial_state(config, profile)
            self.target = factory(config, profile)
            ops = profile.operations & self.target.operations
            self.ops = ops
            self.ctx = draw.Context(
                evict_first=profile.has_evict_first and EVICT_FIRST in self.target.operations,
                peer="peer_get_new_blocks" in ops,
            )
            self.check_view("after construction")

        # --- the lockstep step ----------------------------------------------------------

        def apply(self, action: Action) -> None:
            record.trace.append(action)
            record.steps += 1
            record.operations[action.operation] += 1
            expected_violation = violation(self.state, action)
            before = self.target.view() if expected_violation else None
            try:
                actual = self.target.apply(action)
            except Exception as exc:  # the pool refused; whether it may is judged below
                if expected_violation is None:
                    raise Nonconformance(
                        f"{action.operation} was refused although it is allowed: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                assert before is not None
                changes = view_changes(before, self.target.view())
                if changes:
                    raise Nonconformance(
                        f"{action.operation} was refused (rule '{expected_violation.rule}') but "
                        f"the pool changed: " + "; ".join(changes)
                    ) from exc
                record.refusals[expected_violation.rule] += 1
                self.check_structure(action)
                return
            if expected_violation is not None:
                raise Nonconformance(
                    f"{action.operation} was accepted although it breaks the contract: "
                    f"{expected_violation}"
                )
            if not level.exact_order:
                self.adopt(action, actual.result)
            before_state = self.state
            self.state, expected = step(self.state, action)
            problems = compare_observation(action, expected, actual, self.target.observes)
            if problems:
                raise Nonconformance("; ".join(problems))
            self.check_view(f"after {action.operation}")
            self.check_structure(action)
            broken = broken_invariants(self.state)
            assert not broken, f"the spec broke its own invariants {broken}: a spec bug"
            record.situations.update(situations(before_state, action, self.state, expected))

        def adopt(self, action: Action, result: Any) -> None:
            """``safety``: accept the target's choice of blocks if it is a legal choice."""
            if not isinstance(action, GetNewBlocks | PeerGetNewBlocks):
                return
            pool = self.state if isinstance(action, GetNewBlocks) else self.state.peer
            assert pool is not None
            got = tuple(result) if isinstance(result, tuple) else ()
            if len(got) != action.num_blocks:
                raise Nonconformance(f"{action.operation}({action.num_blocks}) handed out "
                                     f"{len(got)} blocks: {list(got)}")
            for b in got:
                if got.count(b) > 1:
                    raise Nonconformance(f"{action.operation} handed out block {b} twice")
                if not pool.in_range(b) or b not in pool.free:
                    refs = pool.ref_cnt[b] if pool.in_range(b) else "?"
                    raise Nonconformance(f"{action.operation} handed out block {b}, which is "
                                         f"not free (ref_cnt {refs})")
            self.state = adopt_allocation(self.state, got,
                                          peer=isinstance(action, PeerGetNewBlocks))

        def check_view(self, where: str) -> None:
            problems = compare_views(self.state, self.target.view(), level.exact_order)
            if problems:
                raise Nonconformance(f"{where}: " + "; ".join(problems))

        def check_structure(self, action: Action) -> None:
            problems = self.target.structure_problems()
            if problems:
                raise Nonconformance(f"after {action.operation}: free list corrupted: "
                                     + "; ".join(problems))

        def offers(self, operation: str) -> bool:
            return operation in self.ops

        # --- drawing the next action ---------------------------------------------------

        @rule(data=st.data())
        def act(self, data: st.DataObject) -> None:
            """Draw the next kind of action (weighted towards the ones that build state),
            then the action itself, and run it in lockstep."""
            kinds = [k for k, weight in self.kinds() for _ in range(weight)]
            kind = data.draw(st.sampled_from(kinds), label="operation")
            if kind == "out_of_contract":
                self.out_of_contract(data)
                return
            self.apply(DRAWERS[kind](data, self.state, self.ctx))

        def kinds(self) -> list[tuple[str, int]]:
            """The operations that can be drawn now, with their weights."""
            state = self.state
            caching = state.config.enable_caching
            possible = {
                "get_new_blocks": True,
                "free_blocks": bool(draw.held(state)),
                "touch": bool(draw.keyed(state) or draw.held(state)),
                "unpin_blocks": bool(draw.held(state)),
                "cache_full_blocks": caching and bool(draw.held(state)),
                "cache_partial_block": caching and bool(draw.held(state)),
                "get_cached_block": True,
                "evict_blocks": True,
                "move_block_hashes": any(p is None for p in state.primary[1:]),
                "is_block_writable": True,
                "peer_get_new_blocks": self.ctx.peer and state.peer is not None,
                "reset_prefix_cache": True,
                "get_usage": True,
                "get_num_free_blocks": True,
                "take_events": True,
            }
            chosen = [(op, WEIGHTS[op]) for op, ok in possible.items() if ok and self.offers(op)]
            if level.out_of_contract:
                chosen.append(("out_of_contract", 4))
            return chosen

        def out_of_contract(self, data: st.DataObject) -> None:
            drawers = [d for op, ds in draw.BAD_DRAWERS.items() if self.offers(op) for d in ds]
            drawer = data.draw(st.sampled_from(drawers), label="broken rule")
            action = drawer(data, self.state, self.ctx)
            if action is None or violation(self.state, action) is None:
                return
            if isinstance(action, FreeBlocks) and action.foreign and not self.ctx.peer:
                return
            self.apply(action)

    Lockstep.__name__ = Lockstep.__qualname__ = f"Lockstep_{level.name}"
    return Lockstep
