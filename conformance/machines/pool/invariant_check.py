"""The spec's invariants after a step, checked on what the step changed.

A lockstep run checks the spec's own invariants (:data:`kvpool.spec.invariants.INVARIANTS`)
after every step that changed its state: a spec bug must never pass for a pool's. States
are immutable and a transition copies the fields it leaves alone from the state before,
so an invariant that reads only fields the step did not replace still holds where it held
before: :func:`broken_since` evaluates only the invariants that read a replaced field.
Which fields each invariant reads is :data:`READS`; a test reads every invariant's field
accesses over many states and checks that none is missing.
"""

from __future__ import annotations

from dataclasses import fields

from kvpool.spec import PoolState, broken_invariants
from kvpool.spec.invariants import INVARIANTS

#: The :class:`~kvpool.spec.PoolState` fields each invariant reads (``num_blocks`` and
#: ``in_range`` read ``config``; ``free`` reads ``free_queue``; ``keys_of`` reads
#: ``primary`` and ``extra``).
READS: dict[str, frozenset[str]] = {
    "free-iff-unreferenced": frozenset({"config", "free_queue", "ref_cnt"}),
    "queue-holds-each-once": frozenset({"config", "free_queue"}),
    "map-matches-block-keys": frozenset({"config", "cache", "primary", "extra"}),
    "extra-keys-need-primary": frozenset({"primary", "extra"}),
    "null-block-inert": frozenset({"free_queue", "primary", "extra", "watchers", "ref_cnt"}),
    "no-keys-without-caching": frozenset({"config", "cache"}),
    "no-events-when-disabled": frozenset({"config", "events"}),
    "watchers-on-real-blocks": frozenset({"config", "watchers"}),
    "peer-consistent": frozenset({"peer"}),
}
FIELDS = tuple(f.name for f in fields(PoolState))


def broken_since(held: PoolState | None, state: PoolState) -> list[str]:
    """The invariants ``state`` breaks (as :func:`~kvpool.spec.broken_invariants` names
    them), given ``held``, a state that keeps them all (``None``: none known)."""
    if held is None:
        return broken_invariants(state)
    changed = {f for f in FIELDS if getattr(state, f) is not getattr(held, f)}
    return [
        name
        for name, holds in INVARIANTS.items()
        if not READS[name].isdisjoint(changed) and not holds(state)
    ]
