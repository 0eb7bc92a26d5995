"""Questions the pool answers without changing: is_block_writable, get_usage,
get_num_free_blocks; and take_events, which only empties the event list."""

from __future__ import annotations

from dataclasses import replace

from .actions import GetNumFreeBlocks, GetUsage, IsBlockWritable, TakeEvents
from .allocation import out_of_range, refuse
from .errors import ContractViolation
from .flat import block_writable, usage_fraction
from .observation import Observation
from .state import PoolState


def is_block_writable_violation(
    state: PoolState, action: IsBlockWritable
) -> ContractViolation | None:
    return out_of_range(state, (action.block,), action.operation)


def writable(state: PoolState, block: int) -> bool:
    """A block may be written in place only by its sole owner, and only while no key names
    its contents: not null, held exactly once, no key."""
    return block_writable(state.ref_cnt[block], state.primary[block] is not None, block)


def is_block_writable(state: PoolState, action: IsBlockWritable) -> tuple[PoolState, Observation]:
    """Answer whether ``block`` may be written in place: ``True`` exactly when it is
    :func:`writable` (a real block held once with no key), else ``False``. The pool is
    unchanged.

    pre: is_block_writable_violation(state, action) is None
    post: __return__[0] == state
    post: __return__[1].result == writable(state, action.block)
    """
    refuse(is_block_writable_violation(state, action))
    return state, Observation(writable(state, action.block))


def usage(state: PoolState) -> float:
    """The fraction of real blocks out of the free queue (0 for a pool of only the null
    block). Cached blocks in the queue count as free."""
    return usage_fraction(len(state.free_queue), state.num_blocks)


def get_usage(state: PoolState, action: GetUsage) -> tuple[PoolState, Observation]:
    """Return the pool's :func:`usage`: the fraction of real blocks out of the free queue,
    a float from 0.0 (every real block free) to 1.0 (none free). The pool is unchanged.

    post: __return__[0] == state
    post: __return__[1].result == usage(state)
    post: 0.0 <= __return__[1].result <= 1.0
    """
    return state, Observation(usage(state))


def get_num_free_blocks(
    state: PoolState, action: GetNumFreeBlocks
) -> tuple[PoolState, Observation]:
    """Return the free count: how many blocks are in the free queue (cached ones included).
    The pool is unchanged.

    post: __return__[0] == state
    post: __return__[1].result == len(state.free_queue)
    """
    return state, Observation(len(state.free_queue))


def take_events(state: PoolState, action: TakeEvents) -> tuple[PoolState, Observation]:
    """Return the pending events, oldest first, and forget them.

    post: __return__[1].result == state.events
    post: __return__[0].events == ()
    """
    return replace(state, events=()), Observation(state.events)
