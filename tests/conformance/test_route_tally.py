"""route-check's accounting over time: each check's own recall and precision, with the batch
it was made after, and the run's totals; four planted faults in that accounting are each
caught as the part of it they break."""

from __future__ import annotations

import pytest
from kvpool.conformance.tools.routes.scenarios import picked
from kvpool.conformance.tools.routes.tally import Check, Point, Tally

#: Per check: the batches published so far, and per asked prefix (held, claimed).
SCRIPT: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = (
    (4, ((3, 3), (2, 2))),  # exact
    (8, ((4, 2), (2, 2))),  # two of six held blocks lost
    (12, ((2, 4), (0, 1))),  # three blocks claimed that are not held
    (16, ((0, 3),)),  # nothing held (a restarted pool), three claimed
)
CURVE = [
    Point(4, 1.0, 1.0),
    Point(8, 0.6667, 1.0),
    Point(12, 1.0, 0.4),
    Point(16, 1.0, 0.0),
]
#: held, found, claimed, checks
TOTALS = (13, 11, 17, 4)


def accounting_errors(tally: Tally) -> list[str]:
    """What ``tally`` got wrong on :data:`SCRIPT`: ``"curve"`` and/or ``"totals"``."""
    for batch, prefixes in SCRIPT:
        check = Check()
        for held, claimed in prefixes:
            check.add(held, claimed)
        tally.record(check, batch)
    errors = []
    if tally.over_time != CURVE:
        errors.append("curve")
    if (tally.held, tally.found, tally.claimed, tally.checks) != TOTALS:
        errors.append("totals")
    return errors


def test_each_check_is_a_point_and_the_totals_add_up() -> None:
    tally = Tally()
    assert accounting_errors(tally) == []
    assert tally.recall == pytest.approx(11 / 13) and tally.precision == pytest.approx(11 / 17)
    assert tally.lowest_recall == 0.6667


class _Cumulative(Tally):
    """Each point from the running totals: a loss is smoothed away by the checks before."""

    def record(self, check: Check, batch: int) -> None:
        self.checks += 1
        self.merge(check)
        self.over_time.append(Point(batch, round(self.recall, 4), round(self.precision, 4)))


class _CountedNotBatched(Tally):
    """Points placed by their check number, not by the batches published."""

    def record(self, check: Check, batch: int) -> None:
        super().record(check, self.checks + 1)


class _Swapped(Tally):
    """Recall and precision exchanged at each point."""

    def record(self, check: Check, batch: int) -> None:
        super().record(check, batch)
        p = self.over_time[-1]
        self.over_time[-1] = Point(p.batch, p.precision, p.recall)


class _SkipsEmpty(Tally):
    """A check where nothing is held is skipped (no division by zero, and no over-claim)."""

    def record(self, check: Check, batch: int) -> None:
        if check.held:
            super().record(check, batch)


@pytest.mark.parametrize(
    ("planted", "caught"),
    [
        (_Cumulative, ["curve"]),
        (_CountedNotBatched, ["curve"]),
        (_Swapped, ["curve"]),
        (_SkipsEmpty, ["curve", "totals"]),
    ],
)
def test_a_planted_fault_in_the_accounting_is_caught(
    planted: type[Tally], caught: list[str]
) -> None:
    assert accounting_errors(planted()) == caught


def test_a_picked_rank_is_judged_on_its_own_blocks_and_the_best() -> None:
    """A router that picks a rank per prompt: its credit is found up to what the picked
    rank holds, and is lost against what the best rank holds."""
    check = Check()
    check.add_pick(best=5, picked=5, claimed=5)  # the best rank, exact
    check.add_pick(best=5, picked=2, claimed=2)  # a worse rank, credited truly: 3 lost
    check.add_pick(best=5, picked=2, claimed=5)  # a worse rank credited with the best's
    assert (check.held, check.found, check.claimed) == (15, 9, 12)
    assert picked({1: 3}) == (1, 3)
    assert picked({0: 2, 1: 2}) == (0, 2)  # a tie: the lowest rank
    assert picked({}) == (0, 0)  # the decoy: nothing credited
