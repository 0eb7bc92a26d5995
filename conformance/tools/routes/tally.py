"""How well one consumer knew the worker's cache: totals over a run and a point per check.

At a check every asked prompt prefix gives two numbers: the leading blocks the worker
holds (the truth: what a lookup on the spec's pool hits) and the leading blocks the
consumer claims. Of the claim, ``min(truth, claimed)`` is found: the blocks it knew of.
A :class:`Check` sums one check's prefixes; :meth:`Tally.record` adds a check to the run's
totals and keeps its own recall and precision as one :class:`Point` of the run's curve,
so that a loss at one moment is not hidden by the good checks around it.

Recall is found / held (1 when nothing is held: nothing could be lost), precision is
found / claimed (1 when nothing is claimed: nothing was over-claimed).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def share(part: int, whole: int) -> float:
    """``part / whole``, or 1 when ``whole`` is 0 (nothing to lose or to over-claim)."""
    return part / whole if whole else 1.0


@dataclass
class Check:
    """One check: the blocks held, found and claimed, summed over its prefixes."""

    held: int = 0
    found: int = 0
    claimed: int = 0

    def add(self, truth: int, claimed: int) -> None:
        """One prefix: the worker holds ``truth`` leading blocks, the consumer claims
        ``claimed``."""
        self.held += truth
        self.claimed += claimed
        self.found += min(truth, claimed)

    def add_pick(self, best: int, picked: int, claimed: int) -> None:
        """One prefix a router routed to one rank: the best rank holds ``best`` leading
        blocks, the rank it picked ``picked``, and it credits that rank with ``claimed``.
        What it knew of is what the picked rank holds of its claim; what it could have
        found is the best rank's."""
        self.held += best
        self.claimed += claimed
        self.found += min(picked, claimed)

    def merge(self, other: Check) -> None:
        """Add another check's prefixes (another rank's, at the same moment)."""
        self.held += other.held
        self.found += other.found
        self.claimed += other.claimed

    @property
    def recall(self) -> float:
        return share(self.found, self.held)

    @property
    def precision(self) -> float:
        return share(self.found, self.claimed)


@dataclass(frozen=True)
class Point:
    """One check on the run's curve: after ``batch`` batches published."""

    batch: int
    recall: float
    precision: float


@dataclass
class Tally(Check):
    """One consumer over one scenario (or one rank of it): every check summed, and each
    check's own recall and precision in order."""

    checks: int = 0
    over_time: list[Point] = field(default_factory=list)

    def record(self, check: Check, batch: int) -> None:
        """Add ``check``, made after ``batch`` batches, to the totals and the curve."""
        self.checks += 1
        self.merge(check)
        self.over_time.append(Point(batch, round(check.recall, 4), round(check.precision, 4)))

    @property
    def lowest_recall(self) -> float | None:
        return min((p.recall for p in self.over_time), default=None)
