"""The test cases of a diff, for the suite's one search (:mod:`..engine.seeded_search`).

Actions are drawn exactly as for a spec-vs-target run (:func:`~..engine.machine.next_action`,
from the spec's copy of pool A), from the operations the pair draws (:mod:`.common`) and
inside both sides' contracts. A pool neither side can build drops the test case; once a
test case parts (a different but allowed eviction choice at ``safety``), it draws nothing
more.
"""

from __future__ import annotations

from ...machines.pool import draw
from ...machines.pool.levels import Level
from ...machines.pool.lockstep import RunRecord
from ...machines.pool.machine import next_action
from ...search.choices import Choices
from ...search.seeded_search import Dropped, Start, Step
from .loading import Pair
from .pair import PairRun, Unbuildable


def pair_case(pair: Pair, level: Level, max_blocks: int) -> Start:
    """Test cases running pool A against pool B: a pool of up to ``max_blocks`` blocks
    drawn, then one action drawn and applied to both per step."""
    common = pair.common

    def start(choices: Choices, record: RunRecord) -> Step:
        config = draw.pool_config(choices, max_blocks, robustness=False)
        try:
            run = PairRun(pair, level, config, record)
        except Unbuildable as exc:
            raise Dropped() from exc
        ctx = draw.Context(evict_first=common.evict_first, peer=common.peer)

        def step(choices: Choices) -> None:
            if run.parted is not None:
                return
            action = next_action(
                choices, run.state, ctx, common.operations, level, allowed=run.can_apply
            )
            if action is None or not run.can_apply(action):
                record.skipped += 1
            else:
                run.apply(action)

        return step

    return start
