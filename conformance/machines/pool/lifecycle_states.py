"""The six lifecycle states of a block, told apart by what the pool remembers about it (its
ref_cnt, its keys, its reuse watcher).

The machines classify blocks by them (which states a run reached); the docs' lifecycle page
lists them and draws the transitions the spec makes between them
(:mod:`kvpool.conformance.tools.reference.lifecycle`)."""

from __future__ import annotations

from dataclasses import dataclass

from kvpool.spec import PoolState
from kvpool.spec.state import NULL_BLOCK


@dataclass(frozen=True)
class LifecycleState:
    """One of the six states: what tells it apart, and what a caller may do with it."""

    id: str
    title: str
    ref_cnt: str
    key: str
    in_queue: str
    writable: str
    hittable: str


FREE_UNKEYED = LifecycleState(
    "free-unkeyed", "free, no identity", "0", "no", "yes (front area)", "after allocation", "no"
)
FREE_CACHED = LifecycleState(
    "free-cached", "free, cache candidate", "0", "yes", "yes (back area)", "no", "yes (touch)"
)
PRIVATE = LifecycleState("private", "private tail of one request", "1", "no", "no", "yes", "no")
REGISTERED = LifecycleState(
    "registered", "full block of one request, registered", "1", "yes", "no", "no", "yes"
)
SHARED = LifecycleState("shared", "shared", ">= 2", "maybe", "no", "no", "if keyed")
UNPINNED = LifecycleState(
    "unpinned",
    "unpinned, still being read",
    "0",
    "maybe",
    "yes (back)",
    "no (reuse fires the watcher)",
    "if keyed",
)

#: The six states, in the order the docs list them.
STATES: tuple[LifecycleState, ...] = (
    FREE_UNKEYED,
    FREE_CACHED,
    PRIVATE,
    REGISTERED,
    SHARED,
    UNPINNED,
)


def classify(state: PoolState, block: int) -> LifecycleState:
    """The lifecycle state of real block ``block`` in ``state``."""
    if block == NULL_BLOCK:
        raise ValueError("the null block has no lifecycle state: it is never free or held")
    held = state.ref_cnt[block]
    keyed = state.primary[block] is not None
    if held >= 2:
        return SHARED
    if held == 1:
        return REGISTERED if keyed else PRIVATE
    if block in state.watchers:
        return UNPINNED
    return FREE_CACHED if keyed else FREE_UNKEYED
