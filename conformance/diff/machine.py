"""The Hypothesis machine that draws actions for a :class:`~.pair.PairRun`.

Actions are drawn exactly as for a spec-vs-target run (:func:`~..machine.next_action`, from
the spec's copy of pool A), restricted to the operations both pools offer and to actions
inside both sides' contracts. Once a test case parts (a different but allowed eviction
choice at ``safety``), it draws nothing more.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from kvpool.spec import PoolConfig

from ..engine import draw
from ..engine.choices import HypothesisChoices
from ..engine.levels import Level
from ..engine.lockstep import RunRecord
from ..engine.machine import apply_in_case, next_action
from ..engine.signature import signature
from .loading import Pair
from .pair import Difference, PairRun, Unbuildable


def pair_machine(
    pair: Pair,
    level: Level,
    max_blocks: int,
    record: RunRecord,
    on_example: Callable[[RunRecord], None] | None = None,
    known: frozenset[str] = frozenset(),
) -> type[RuleBasedStateMachine]:
    """A machine class running pool A against pool B. A test case that runs into a
    difference of a kind in ``known`` (by :func:`~..lockstep.signature`) is dropped."""
    common = pair.common

    class PairLockstep(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            record.examples += 1
            if on_example is not None:
                on_example(record)

        @initialize(config=draw.configs(max_blocks, robustness=False))
        def build(self, config: PoolConfig) -> None:
            try:
                self.run = PairRun(pair, level, config, record)
            except Unbuildable:
                reject()
            except Difference as exc:
                if signature(str(exc)) in known:
                    reject()
                raise
            self.ctx = draw.Context(evict_first=common.evict_first, peer=common.peer)

        @rule(data=st.data())
        def act(self, data: st.DataObject) -> None:
            """Draw the next action both pools take and apply it to both."""
            if self.run.parted is not None:
                return
            action = next_action(
                HypothesisChoices(data), self.run.state, self.ctx, common.operations, level
            )
            if action is not None and self.run.can_apply(action):
                apply_in_case(self.run.apply, action, known)

    PairLockstep.__name__ = PairLockstep.__qualname__ = f"Diff_{level.name}"
    return PairLockstep
