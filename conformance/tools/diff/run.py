"""Running a diff: search, collect distinct differences, shrink each.

The search, telling differences apart and shrinking are the suite's own, as for every
machine (:func:`~..engine.runner.run_seeded`, :func:`~..engine.shrink.shrink_sequence`);
only the test case differs: it runs pool A against pool B instead of a target against the
spec (:mod:`.case`). Shrinking keeps the kind of each difference, so it never swaps one for
another that is easier to reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...machines.pool.levels import Level
from ...machines.pool.lockstep import RunRecord
from ...machines.pool.runner import Failure, run_seeded
from .case import pair_case
from .loading import Pair
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

    def shrunk(found: Failure) -> Failure:
        return shrink_difference(pair, level, found, shrink_seconds)

    result = run_seeded(
        pair_case(pair, level, max_blocks),
        record,
        level,
        shrunk,
        machine="diff",
        max_examples=max_examples,
        steps=steps,
        seed=seed,
        on_example=on_example,
        max_findings=max_findings,
        findings_seconds=findings_seconds,
        min_valid=0,
    )
    return DiffResult(pair, level, record, result.seconds, result.failures)
