"""Seeded runs that draw the same test cases whatever else the process has imported.

Hypothesis (6.x) sometimes draws a literal found in the source of the *local* modules
loaded in the process (those outside site-packages and the standard library) instead of
a random value. That list grows with every import, so one seed drew different actions
in a bare ``kvpool conform`` than under pytest, or after a target's loader had imported
one more of our modules: seed 2 at safety ran 5774 steps in a bare process and 5951
after importing the package. A seed must name one run, so while a lockstep run draws,
Hypothesis sees no local constants; its own built-in constants (edge integers, special
floats) still apply, and they depend on nothing but its version.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import Constants


def _no_local_constants() -> Constants:
    return Constants()


@contextmanager
def without_source_constants() -> Iterator[None]:
    """Within this block, Hypothesis draws no literal taken from a loaded module's source.

    The cache of permitted constants is cleared on the way in and out, so neither a
    constant found before the block nor the empty set used within leaks across it.
    """
    found = providers._get_local_constants
    providers.CONSTANTS_CACHE.cache.clear()
    providers._get_local_constants = _no_local_constants
    try:
        yield
    finally:
        providers._get_local_constants = found
        providers.CONSTANTS_CACHE.cache.clear()
