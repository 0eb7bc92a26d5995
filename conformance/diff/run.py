"""Running a diff: explore with Hypothesis, collect distinct differences, shrink each.

Exploring, telling differences apart and shrinking are the suite's own
(:func:`~..runner.find_all`, :func:`~..shrink.shrink_sequence`); only the replay differs:
it runs pool A against pool B instead of a target against the spec. Shrinking keeps the
kind of each difference, so it never swaps one for another that is easier to reach.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis.stateful import RuleBasedStateMachine

from ..engine.levels import Level
from ..engine.lockstep import RunRecord
from ..engine.runner import Failure, find_all, machine_search
from .loading import Pair
from .machine import pair_machine
from .pair import PARTED
from .shrink import shrink_difference


@dataclass(frozen=True)
class DiffResult:
    """What a diff found: the distinct differences, each shrunk, in the order found."""

    pair: Pair
    level: Level
    record: RunRecord
    seconds: float
    differences: tuple[Failure, ...]

    @property
    def parted(self) -> int:
        """Test cases that stopped at an allowed, different eviction choice (``safety``)."""
        return self.record.situations[PARTED]


def run_diff(
    pair: Pair,
    level: Level,
    *,
    max_examples: int,
    steps: int,
    seed: int,
    max_blocks: int,
    max_findings: int = 10,
    on_example: Callable[[RunRecord], None] | None = None,
    shrink_seconds: float = 20.0,
    findings_seconds: float = 60.0,
) -> DiffResult:
    """Run A against B at ``level`` for ``max_examples`` test cases of up to ``steps``
    actions; up to ``max_findings`` distinct differences, each shrunk."""
    record = RunRecord()

    def machine(known: frozenset[str]) -> type[RuleBasedStateMachine]:
        return pair_machine(pair, level, max_blocks, record, on_example, known)

    def shrunk(found: Failure) -> Failure:
        return shrink_difference(pair, level, found, shrink_seconds)

    start = time.perf_counter()
    differences = find_all(
        machine_search(machine, record, max_examples=max_examples, steps=steps),
        record,
        shrunk,
        seed=seed,
        max_findings=max_findings,
        budget_seconds=findings_seconds,
    )
    return DiffResult(pair, level, record, time.perf_counter() - start, differences)
