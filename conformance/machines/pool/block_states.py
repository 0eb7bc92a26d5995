"""The state a block is in, finer than the six lifecycle states.

The lifecycle page names six states (:func:`~.lifecycle_states.classify`). Its notes
find more that a pool must handle apart: a held unkeyed block that is touched becomes
shared without a key; ``unpin_blocks`` on a block held twice leaves a held block whose
watcher waits; an unpinned block may or may not carry a key (with one it can be hit, and
without one ``free_blocks`` puts it at the front). Each of these is a distinct state here
(a held block whose watcher waits is one state, keyed or not), and the null block is one
of its own, since the caller may name it in most calls.
"""

from __future__ import annotations

from kvpool.spec import NULL_BLOCK, PoolState

from .lifecycle_states import (
    FREE_CACHED,
    FREE_UNKEYED,
    PRIVATE,
    REGISTERED,
    SHARED,
    UNPINNED,
    classify,
)

NULL = "null"
#: Held once, a reuse watcher waiting (set while the block was shared): private or
#: registered, with or without a key, as the lifecycle page's notes put it.
HELD_WATCHED = "held watched"
SHARED_UNKEYED = "shared unkeyed"
SHARED_KEYED = "shared keyed"
UNPINNED_UNKEYED = "unpinned unkeyed"
UNPINNED_KEYED = "unpinned keyed"

#: Every block state, in the lifecycle page's order, the null block last.
BLOCK_STATES: tuple[str, ...] = (
    FREE_UNKEYED.id,
    FREE_CACHED.id,
    PRIVATE.id,
    REGISTERED.id,
    HELD_WATCHED,
    SHARED_UNKEYED,
    SHARED_KEYED,
    UNPINNED_UNKEYED,
    UNPINNED_KEYED,
    NULL,
)


def block_state(state: PoolState, block: int) -> str:
    """The state of ``block`` (any id in range, the null block included) in ``state``."""
    if block == NULL_BLOCK:
        return NULL
    six = classify(state, block).id
    keyed = state.primary[block] is not None
    watched = block in state.watchers
    if six in (PRIVATE.id, REGISTERED.id) and watched:
        return HELD_WATCHED
    if six == SHARED.id:
        return SHARED_KEYED if keyed else SHARED_UNKEYED
    if six == UNPINNED.id:
        return UNPINNED_KEYED if keyed else UNPINNED_UNKEYED
    return six


class _Latest:
    """The block states of the latest pool state asked about. A step asks about one state
    many times (its drawers, then the coverage of the action drawn), and states are
    immutable, so the states of its blocks are worked out once per step."""

    state: PoolState | None = None
    states: tuple[str, ...] = ()


#: :func:`block_state` by what it reads of a real block: its hold (0 for none, 1, 2 for two
#: or more), whether it has a key and whether a reuse watcher waits on it. Filled as each
#: is first met, by :func:`block_state` itself.
_BY_SIGNS: dict[tuple[int, bool, bool], str] = {}


def block_states(state: PoolState) -> tuple[str, ...]:
    """:func:`block_state` of every block of ``state``, by id (the null block first)."""
    if _Latest.state is not state:
        ref_cnt, primary, watchers = state.ref_cnt, state.primary, state.watchers
        found = [NULL] if state.num_blocks else []
        for b in range(1, state.num_blocks):
            held = ref_cnt[b]
            signs = (
                2 if held >= 2 else 1 if held == 1 else 0,
                primary[b] is not None,
                b in watchers,
            )
            named = _BY_SIGNS.get(signs)
            if named is None:
                named = _BY_SIGNS[signs] = block_state(state, b)
            found.append(named)
        _Latest.states = tuple(found)
        _Latest.state = state  # kept alive here, so its id is never another state's
    return _Latest.states
