"""One lockstep run of two pools against each other: the same action applied to both.

No spec judges here: the verdict is whether A and B agree. The spec only keeps track of
pool A (adopting every block A hands out), so that actions can be drawn inside the caller's
contract of *both* sides' profiles, and so that ``safety`` knows which free blocks are
interchangeable (:mod:`.renaming`).

After every action, in this order: one side refusing it and the other not is a difference;
then the results (and reuse-watcher firings, events) are compared, then what both show of
their state (free count; free queue as a set at ``safety``, in order at ``order``; ref
counts; keys), then each side's own free-list links.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from kvpool.spec import (
    Action,
    GetNewBlocks,
    Observation,
    PeerGetNewBlocks,
    PoolConfig,
    PoolState,
    adopt_allocation,
    initial_state,
    step,
    violation,
)

from ...machines.pool.levels import Level
from ...machines.pool.lockstep import Nonconformance, RunRecord, replay_actions
from ...machines.pool.target import EVICT_FIRST, Target
from ...trace.outcomes import NotOffered
from .common import label
from .compare import block_ids, compare_results, compare_views
from .loading import Pair
from .renaming import Renaming

#: The fields of an action that name blocks of the pool, and of the peer pool.
BLOCK_FIELDS = ("blocks", "block_ids", "block", "src", "dst")
PEER_FIELDS = ("foreign",)
#: What ``RunRecord.situations`` counts a parted test case under.
PARTED = "parted at an eviction choice"
#: ... and a replayed action outside the contract, which both pools took alike.
LEFT = "left the contract"


class Difference(Nonconformance):
    """Pool A and pool B did not agree on an action."""


class Unbuildable(Exception):
    """Neither pool can be built with this configuration (not a difference)."""


@dataclass(frozen=True)
class Outcomes:
    """What each side made of the latest action: an observation, the exception it raised,
    or ``None`` where it has not been asked."""

    a: Observation | Exception | None
    b: Observation | Exception | None


def refusal_text(exc: Exception) -> str:
    """A refusal as it reads in a difference: the rule id unquoted, so that the kind of
    the difference is which side refused, not which rule its message names."""
    return re.sub(r"\b(rule|property) '([a-z0-9-]+)'", r"\1 \2", f"{type(exc).__name__}: {exc}")


class PairRun:
    """Pool A and pool B built from ``config``, compared after every action."""

    def __init__(
        self, pair: Pair, level: Level, config: PoolConfig, record: RunRecord | None = None
    ) -> None:
        self.pair = pair
        self.level = level
        self.record = record if record is not None else RunRecord()
        self.record.trace = []
        self.record.config = config
        self.last = Outcomes(None, None)
        #: Why the run stopped comparing without a difference (``None`` while it compares).
        self.parted: str | None = None
        self.a, self.b = self._build(config)
        self.observes = pair.common.observes & self.a.observes & self.b.observes
        #: The spec's copy of pool A, under A's profile and under B's (for B's contract).
        self.state: PoolState = initial_state(config, pair.a.profile)
        self.state_b: PoolState = initial_state(config, pair.b.profile)
        exact = level.exact_order
        self.main = Renaming(config.num_gpu_blocks, fixed=exact)
        self.peer = Renaming(config.peer_blocks, fixed=exact) if config.peer_blocks else None
        self.check_views("after construction")

    def _build(self, config: PoolConfig) -> tuple[Target, Target]:
        built: list[Target | Exception] = []
        for factory, side in ((self.pair.build_a, self.pair.a), (self.pair.build_b, self.pair.b)):
            try:
                built.append(factory(config, side.profile))
            except Exception as exc:  # a pool that does not take this configuration
                built.append(exc)
        a, b = built
        if isinstance(a, Exception) and isinstance(b, Exception):
            raise Unbuildable(f"neither pool can be built: {refusal_text(a)}")
        if isinstance(a, Exception):
            raise Difference(f"construction: only A refuses this pool: {refusal_text(a)}")
        if isinstance(b, Exception):
            raise Difference(f"construction: only B refuses this pool: {refusal_text(b)}")
        return a, b

    # --- what may be drawn ---------------------------------------------------------------

    def can_apply(self, action: Action) -> bool:
        """Whether ``action`` is one the pair draws, inside both sides' contracts now (an
        action only one side's pool takes: inside that side's contract)."""
        common = self.pair.common
        if action.operation not in common.operations:
            return False
        if getattr(action, "evict_first", False) and not common.evict_first:
            return False
        if getattr(action, "foreign", ()) and not common.peer:
            return False
        one_side = common.taken_by_one(_operation(action))
        if one_side is not None:
            return violation(self.state if one_side[0] == "A" else self.state_b, action) is None
        return violation(self.state, action) is None and violation(self.state_b, action) is None

    # --- one step ------------------------------------------------------------------------

    def for_b(self, action: Action) -> Action:
        """``action`` with A's block ids replaced by B's."""
        if self.main.identity and (self.peer is None or self.peer.identity):
            return action
        changes: dict[str, Any] = {}
        for f in fields(action):
            value = getattr(action, f.name)
            renaming = (
                self.main
                if f.name in BLOCK_FIELDS
                else self.peer
                if f.name in PEER_FIELDS
                else None
            )
            if renaming is None:
                continue
            if isinstance(value, tuple):
                changes[f.name] = tuple(renaming.to_b(x) for x in value)
            elif isinstance(value, int):
                changes[f.name] = renaming.to_b(value)
        return replace(action, **changes) if changes else action

    def apply(self, action: Action) -> None:
        """Apply ``action`` to both pools; raise :class:`Difference` when they disagree.
        Does nothing once the run has parted."""
        if self.parted is not None:
            return
        self.record.trace.append(action)
        self.record.steps += 1
        self.record.operations[action.operation] += 1
        one_side = self.pair.common.taken_by_one(_operation(action))
        if one_side is not None:
            self._one_sided(action, one_side[0])
        outcome_a = _try(self.a, action)
        outcome_b = _try(self.b, self.for_b(action))
        self.last = Outcomes(outcome_a, outcome_b)
        op = action.operation
        if isinstance(outcome_a, Exception) != isinstance(outcome_b, Exception):
            who, other = ("A", "B") if isinstance(outcome_a, Exception) else ("B", "A")
            exc = outcome_a if isinstance(outcome_a, Exception) else outcome_b
            assert isinstance(exc, Exception)
            raise Difference(
                f"{op}: refused by {who} only ({other} accepted it): {refusal_text(exc)}"
            )
        if isinstance(outcome_a, Exception) or isinstance(outcome_b, Exception):
            self.record.refusals[f"refused by both: {op}"] += 1
            self.check_views(f"after {op} (refused by both)")
            return
        assert isinstance(outcome_a, Observation) and isinstance(outcome_b, Observation)
        if self._parts(action, outcome_a, outcome_b):
            return
        problems = compare_results(
            action, outcome_a, outcome_b, self.observes, self.main, self.peer
        )
        if problems:
            raise Difference("; ".join(problems))
        self._follow(action, outcome_a)
        if self.parted is not None:
            return
        self.check_views(f"after {op}")
        self.check_structure(op)

    def _one_sided(self, action: Action, taker: str) -> None:
        """``action``, which only ``taker``'s pool takes: called on that side alone, and a
        difference whatever it answers."""
        name = label(_operation(action))
        lacking = "B" if taker == "A" else "A"
        if taker == "A":
            self.last = Outcomes(_try(self.a, action), NotOffered(f"B lacks {name}"))
        else:
            self.last = Outcomes(NotOffered(f"A lacks {name}"), _try(self.b, self.for_b(action)))
        raise Difference(f"{name}: taken by {taker} only; {lacking}'s pool lacks it")

    def _parts(self, action: Action, a: Observation, b: Observation) -> bool:
        """Rename B's newly handed-out blocks onto A's; whether the run parts here."""
        if not isinstance(action, GetNewBlocks | PeerGetNewBlocks):
            return False
        peer = isinstance(action, PeerGetNewBlocks)
        renaming = self.peer if peer else self.main
        before = self.state.peer if peer else self.state
        if renaming is None or before is None:
            return False
        parting = renaming.match(before, block_ids(a.result), block_ids(b.result))
        if parting is None:
            return False
        self._part(f"{action.operation}: {parting.message}")
        return True

    def _part(self, why: str, situation: str = PARTED) -> None:
        """Stop comparing (no difference): ``why`` is kept, ``situation`` counted."""
        self.parted = why
        self.record.situations[situation] += 1

    def _follow(self, action: Action, a: Observation) -> None:
        """Step the spec's copies of pool A, adopting the blocks A handed out."""
        broken = violation(self.state, action) or violation(self.state_b, action)
        if broken is not None:
            # both pools took it alike, but the spec cannot follow outside the contract
            self._part(f"{action.operation} is outside the contract ({broken}); not followed", LEFT)
            return
        if isinstance(action, GetNewBlocks | PeerGetNewBlocks):
            peer, got = isinstance(action, PeerGetNewBlocks), block_ids(a.result)
            self.state = adopt_allocation(self.state, got, peer=peer)
            self.state_b = adopt_allocation(self.state_b, got, peer=peer)
        self.state, _ = step(self.state, action)
        self.state_b, _ = step(self.state_b, action)

    def check_views(self, where: str) -> None:
        problems = compare_views(
            self.a.view(), self.b.view(), self.main, self.level.exact_order, self.peer
        )
        if problems:
            raise Difference(f"{where}: " + "; ".join(problems))

    def check_structure(self, op: str) -> None:
        """Each pool's own free-list links; a difference when only one side is broken."""
        broken_a, broken_b = self.a.structure_problems(), self.b.structure_problems()
        if bool(broken_a) != bool(broken_b):
            who, problems = ("A", broken_a) if broken_a else ("B", broken_b)
            raise Difference(
                f"after {op}: free list of {who} only corrupted: " + "; ".join(problems)
            )


def _operation(action: Action) -> str:
    """The operation ``action`` is, as the pair's operations name it (``free_blocks``
    freeing to the front is :data:`~..engine.target.EVICT_FIRST`)."""
    return EVICT_FIRST if getattr(action, "evict_first", False) else action.operation


def _try(target: Target, action: Action) -> Observation | Exception:
    try:
        return target.apply(action)
    except Exception as exc:  # the pool refused; whether both did is judged by the caller
        return exc


def replay(
    pair: Pair,
    level: Level,
    config: PoolConfig,
    actions: Sequence[Action],
    skip_out_of_contract: bool = False,
) -> tuple[str | None, list[Action]]:
    """Run ``actions`` on fresh pools A and B: the first difference (``None`` if they agree)
    and the actions actually run. With ``skip_out_of_contract``, actions that either side's
    contract no longer allows at their turn (the shrinker dropped what they needed) are
    left out. Once the run parts (:mod:`.renaming`), the rest is left out."""
    try:
        run = PairRun(pair, level, config)
    except Difference as exc:
        return str(exc), []
    except Unbuildable:
        return None, []

    def skip(action: Action) -> bool:
        return run.parted is not None or (skip_out_of_contract and not run.can_apply(action))

    return replay_actions(run.apply, actions, skip)
