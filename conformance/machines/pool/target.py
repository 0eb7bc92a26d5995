"""The adapter contract: what the suite needs from a pool under test.

A target applies one :class:`~kvpool.spec.actions.Action` at a time and returns the
:class:`~kvpool.spec.observation.Observation` its pool gave; it raises (any exception) when
its pool refuses the action. It says which operations it offers and what it can show of its
state: the free count is required, the rest (queue order, ref counts, keys, events,
watcher firings, a peer pool, linked-list structure) is optional and compared when shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kvpool.spec import Action, Observation, PoolConfig, Profile

#: What a target may be able to show, beyond returned ids, the free count and lookups.
OBSERVABLES = (
    "free_queue",
    "ref_cnt",
    "keys",
    "index",
    "events",
    "watchers",
    "peer",
    "structure",
)
#: Not a thing shown but how a target's events are read, which its ``observes`` may say
#: beside :data:`OBSERVABLES`: they name a coarse key by its last fine hash, as a consumer
#: of the pool's 64-bit integer hashes reads them (profile knob
#: ``coarse_events_name_fine_hash``), so the spec's events are read the same way.
FINE_EVENT_HASHES = "events-by-fine-hash"

#: The prefix-cache index as a view shows it: every key with the blocks cached under it,
#: in the order a lookup sees them (the block a lookup returns first), keys in byte order.
Index = tuple[tuple[bytes, tuple[int, ...]], ...]

#: The pool's own lookups of keys it was shown: each key (in byte order) with the block its
#: ``get_cached_block`` returned for that key alone (``None``: a miss).
Lookups = tuple[tuple[bytes, int | None], ...]

#: A pseudo-operation: ``free_blocks`` takes ``evict_first``.
EVICT_FIRST = "free_blocks:evict_first"


@dataclass(frozen=True)
class PoolView:
    """A snapshot of a pool's state, as far as its target can see (``None`` = not shown).

    ``ref_cnt`` and ``keys`` are indexed by block id; the null block's count is not
    maintained by any pool and is never compared. ``keys`` holds every key of a block, as
    the blocks carry them; ``index`` is the prefix-cache index itself (the hash -> blocks
    multimap a lookup reads), so a key left in the index after its block lost it shows.
    ``lookups`` is what the pool's lookups answer for keys the adapter probed (all the keys
    it was shown when the index is hidden, else those that left the index).
    """

    free_count: int
    free_queue: tuple[int, ...] | None = None
    ref_cnt: tuple[int, ...] | None = None
    keys: tuple[frozenset[bytes], ...] | None = None
    primary: tuple[bytes | None, ...] | None = None
    index: Index | None = None
    lookups: Lookups | None = None
    peer: PoolView | None = None


@runtime_checkable
class Target(Protocol):
    """A pool under test, driven one action at a time."""

    #: A short name for tables and traces.
    name: str
    #: ``Action.operation`` names this target can apply (plus :data:`EVICT_FIRST`).
    operations: frozenset[str]
    #: Which of :data:`OBSERVABLES` it shows.
    observes: frozenset[str]

    def apply(self, action: Action) -> Observation:
        """Apply ``action`` to the pool; raise if the pool refuses it."""
        ...

    def view(self) -> PoolView:
        """The pool's state now."""
        ...

    def structure_problems(self) -> list[str]:
        """Internal inconsistencies (free-list links, counters); ``[]`` when sound or hidden."""
        ...


#: A target may also define ``takes(action) -> bool``: whether its pool's calls take this
#: action's optional arguments (``block_mask``, ``replace_existing_hashes``, ...). Actions
#: it does not take are never drawn for it, so a pool is judged on what it offers, as
#: :data:`EVICT_FIRST` does for ``free_blocks``.
TAKES = "takes"
#: The name of a target's optional method ``plan(actions)``: the runner says which actions
#: it applies next (a replayed sequence, the steps a test case draws ahead), so a target
#: that takes several at once (the wire protocol's batches) can send them together. Each
#: still comes by ``apply``, and the runner may apply others instead.
PLAN = "plan"
#: The name of a target factory's optional method ``plan_first(actions)``: the actions the
#: next target it builds applies first (a replay), so that a program can be sent them with
#: the message that starts its pool.
PLAN_FIRST = "plan_first"
#: The name of a target factory's optional method ``plan_next(config, profile, actions)``:
#: a target it builds later, the next or after those said before (a replay of many
#: sequences), so that a program can start computing it while the runner judges those
#: before.
PLAN_NEXT = "plan_next"


#: Builds a fresh target for one test case.
TargetFactory = Callable[[PoolConfig, Profile], Target]
