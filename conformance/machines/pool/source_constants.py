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
from typing import Any

from hypothesis.internal.conjecture import providers

try:
    from hypothesis.internal.constants_ast import Constants as _Constants
except ImportError:  # a Hypothesis older than its source constants: nothing to keep out
    _Constants = None  # type: ignore[assignment,misc]


def _no_local_constants() -> Any:
    return _Constants()


@contextmanager
def without_source_constants() -> Iterator[None]:
    """Within this block, Hypothesis draws no literal taken from a loaded module's source.

    The cache of permitted constants is cleared on the way in and out, so neither a
    constant found before the block nor the empty set used within leaks across it. With a
    Hypothesis that draws no such literals (older than 6.131), it does nothing.
    """
    found = getattr(providers, "_get_local_constants", None)
    if found is None or _Constants is None:
        yield
        return
    providers.CONSTANTS_CACHE.cache.clear()
    providers._get_local_constants = _no_local_constants
    try:
        yield
    finally:
        providers._get_local_constants = found
        providers.CONSTANTS_CACHE.cache.clear()
