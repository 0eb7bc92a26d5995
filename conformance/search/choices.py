"""Where the drawing of actions gets its choices: a seeded ``random.Random``, the same on
every run and every Python (a seed names one run, one vector). The drawers in :mod:`.draw`
only ask for choices through this."""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from operator import itemgetter
from typing import Protocol, TypeVar

T = TypeVar("T")


class Choices(Protocol):
    def integer(self, low: int, high: int, label: str) -> int:
        """An integer in ``low .. high`` (both included)."""
        ...

    def choice(self, options: Sequence[T], label: str) -> T:
        """One of ``options`` (not empty)."""
        ...

    def weighted(self, options: Sequence[tuple[T, int]], label: str) -> T:
        """One of ``options``' values, each as likely as its weight says (ints >= 0, not
        all 0): the same as :meth:`choice` on the list where each value stands as
        many times as its weight, in order, and drawn by the same choices."""
        ...

    def boolean(self, label: str) -> bool: ...

    def items(
        self, options: Sequence[T], min_size: int, max_size: int, label: str, unique: bool = False
    ) -> list[T]:
        """Between ``min_size`` and ``max_size`` of ``options`` (distinct ones if ``unique``)."""
        ...


class RandomChoices:
    """Choices from a seeded ``random.Random``: the same seed, the same choices."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)

    def integer(self, low: int, high: int, label: str) -> int:
        return self.rng.randint(low, high)

    def choice(self, options: Sequence[T], label: str) -> T:
        return options[self.rng.randrange(len(options))]

    def weighted(self, options: Sequence[tuple[T, int]], label: str) -> T:
        # The draw ``choice(expanded(options))`` makes, without building the list: the
        # value whose stretch of it holds the position drawn (its running total is the
        # first past the position; a weight of 0 has no stretch).
        ends = list(accumulate(map(_WEIGHT, options)))
        return options[bisect_right(ends, self.rng.randrange(ends[-1] if ends else 0))][0]

    def boolean(self, label: str) -> bool:
        return self.rng.random() < 0.5

    def items(
        self, options: Sequence[T], min_size: int, max_size: int, label: str, unique: bool = False
    ) -> list[T]:
        if not options:
            return []
        if unique:
            pool = list(dict.fromkeys(options))
            size = self.rng.randint(min(min_size, len(pool)), min(max_size, len(pool)))
            return self.rng.sample(pool, size)
        size = self.rng.randint(min_size, max_size)
        return [self.choice(options, label) for _ in range(size)]


_WEIGHT = itemgetter(1)


def expanded(options: Sequence[tuple[T, int]]) -> list[T]:
    """Each value of ``options`` as many times as its weight, in order."""
    return [value for value, weight in options for _ in range(weight)]
