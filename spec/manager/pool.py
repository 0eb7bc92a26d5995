"""The pool as the manager sees it: a function that applies one pool action.

The manager never reads the pool's state directly; it calls operations, as a real KV cache
manager does. The spec runs it over the spec's own pool (:func:`spec_pool`); the
conformance suite runs the same program over a pool under test.
"""

from __future__ import annotations

from collections.abc import Callable

from ..actions import Action
from ..observation import Observation
from ..state import PoolState
from ..step import step

#: Apply one pool action; raise if the pool refuses it.
PoolCall = Callable[[Action], Observation]


class SpecPool:
    """A spec pool state that advances as the manager calls it; ``calls`` lists the calls."""

    def __init__(self, state: PoolState) -> None:
        self.state = state
        self.calls: list[Action] = []

    def __call__(self, action: Action) -> Observation:
        self.state, observation = step(self.state, action)
        self.calls.append(action)
        return observation


def blocks_of(observation: Observation) -> tuple[int, ...]:
    """The block ids an observation returned (a lookup miss is no blocks)."""
    result = observation.result
    if result is None:
        return ()
    assert isinstance(result, tuple)
    return tuple(b for b in result if isinstance(b, int))


def count_of(observation: Observation) -> int:
    result = observation.result
    assert isinstance(result, int)
    return result
