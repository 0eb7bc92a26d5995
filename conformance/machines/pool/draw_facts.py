"""What the pool machine's draw of the next operation depends on: a few facts about the
spec's state and the drawing context, worked out once per step.

Each operation of :mod:`.operations` names the facts it needs to be drawn at all (a free
needs a held block) and those that make it four times as likely (a lookup just after a key
lost a block); :func:`facts` is the one place that reads them off a state.
"""

from __future__ import annotations

from typing import Final

from kvpool.spec import PoolState

from . import draw


class Fact:
    """The facts about the state (and the drawing context) an operation's draw depends on,
    by name (strings: a step builds a set of them, and strings hash fastest)."""

    #: Some real block is held.
    HELD: Final = "held"
    #: Some real block is held or keyed: something a touch can hit.
    HIT: Final = "hit"
    #: The pool caches.
    CACHING: Final = "caching"
    #: Some real block carries no key (somewhere to move keys to).
    UNKEYED: Final = "unkeyed"
    #: A peer pool exists and the target takes its blocks.
    PEER: Final = "peer"
    #: A block carries extra keys: where moves go wrong.
    EXTRA_KEYS: Final = "extra keys"
    #: Every real block is free: the only time a reset does anything.
    IDLE: Final = "idle"
    #: The last step dropped a key from a block: is it still served?
    JUST_DROPPED: Final = "just dropped"
    #: A key is cached on several blocks: evictions drop them one at a time.
    DUPLICATES: Final = "duplicates"
    #: Drawing for the events level with two keys cached: a parent evicted before its
    #: child is what routers' trees get wrong.
    EVENTS_TWO_KEYS: Final = "events, two keys"
    #: A block is held twice or more: unpinned, it stays held with its watcher waiting.
    SHARED: Final = "shared"
    #: A block is in a state few steps reach: the queries and the calls naming a block
    #: should meet it.
    RARE: Final = "rare"
    #: As :attr:`RARE`, with a block held (a reset is then refused: nothing lost).
    RARE_HELD: Final = "rare, held"


def facts(state: PoolState, ctx: draw.Context) -> frozenset[str]:
    """The facts that hold in ``state`` for drawing with ``ctx``."""
    real = state.primary[1:]
    held = any(state.ref_cnt[1:])  # counts are never negative (invariant 1)
    found: set[str] = set()
    if held:
        found.add(Fact.HELD)
    if held or real.count(None) != len(real):
        found.add(Fact.HIT)
    if state.config.enable_caching:
        found.add(Fact.CACHING)
    if None in real:
        found.add(Fact.UNKEYED)
    if ctx.peer and state.peer is not None:
        found.add(Fact.PEER)
    if any(state.extra):
        found.add(Fact.EXTRA_KEYS)
    if len(state.free_queue) == state.num_blocks - 1:
        found.add(Fact.IDLE)
    if ctx.just_dropped:
        found.add(Fact.JUST_DROPPED)
    cache = state.cache
    if any(len(blocks) > 1 for blocks in cache.values()):
        found.add(Fact.DUPLICATES)
    if ctx.for_events and len(cache) >= 2:
        found.add(Fact.EVENTS_TWO_KEYS)
    if max(state.ref_cnt) >= 2:
        found.add(Fact.SHARED)
    if draw.has_rare_blocks(state):
        found.add(Fact.RARE)
        if held:
            found.add(Fact.RARE_HELD)
    return frozenset(found)
