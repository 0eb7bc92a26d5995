"""Which operations a run drew on blocks in which state, and which it could have.

Every accepted action is recorded as cells ``(row, block state)``: the row is the
operation (``move_block_hashes`` has one row per role, ``free_blocks`` one more for
``evict_first``), the state is :func:`~.block_states.block_state` of each block the action
names, taken before the action. ``get_new_blocks`` names the blocks it hands out, a lookup
the blocks it hits (a miss names none), ``cache_full_blocks`` the blocks it caches as full
and the null block if it is among them (not the prefix before them, nor masked-out blocks:
the pool only reads past those).
The pool-wide calls (``reset_prefix_cache``, ``get_usage``, ``get_num_free_blocks``,
``take_events``) name no block: they count once for every state some real block is in at
the time, since their answer depends on all of them. ``peer_get_new_blocks`` and the
foreign blocks of ``free_blocks`` act on the peer pool and are left out. Refused actions
(the robustness level) are not cells: the coverage table counts them by rule.

Which cells can be reached at all is not written down: :func:`reachable_cells` explores a
small spec pool as the lifecycle page does and keeps the cells of every action the contract
allows in every state it reaches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from kvpool.spec import (
    NULL_BLOCK,
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    ContractViolation,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    MoveBlockHashes,
    Observation,
    PoolConfig,
    PoolState,
    Profile,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
    initial_state,
    step,
)
from kvpool.spec.caching import blocks_to_cache
from kvpool.spec.keys import group_of, hash_of

from .block_states import BLOCK_STATES, block_states

FREE_EVICT_FIRST = "free_blocks evict_first"
MOVE_SOURCE = "move_block_hashes src"
MOVE_DESTINATION = "move_block_hashes dst"
LOOKUP_HIT = "get_cached_block hit"
#: The calls that name no block: each counts for every state present in the pool.
POOL_WIDE = ("reset_prefix_cache", "get_usage", "get_num_free_blocks", "take_events")

#: The rows of the matrix, in the order the table shows them.
ROWS: tuple[str, ...] = (
    "get_new_blocks",
    "free_blocks",
    FREE_EVICT_FIRST,
    "touch",
    "unpin_blocks",
    "cache_full_blocks",
    "cache_partial_block",
    LOOKUP_HIT,
    "evict_blocks",
    MOVE_SOURCE,
    MOVE_DESTINATION,
    "is_block_writable",
    *POOL_WIDE,
)

Cell = tuple[str, str]


def cells(before: PoolState, action: Action, observation: Observation) -> set[Cell]:
    """The cells one accepted ``action`` reached from ``before`` (what it observed)."""
    named: list[tuple[str, Iterable[int]]] = []
    match action:
        case GetNewBlocks():
            named.append((action.operation, _blocks(observation)))
        case FreeBlocks(blocks=blocks, evict_first=evict_first):
            named.append((FREE_EVICT_FIRST if evict_first else action.operation, blocks))
        case Touch(blocks=blocks) | UnpinBlocks(blocks=blocks) | EvictBlocks(block_ids=blocks):
            named.append((action.operation, blocks))
        case CacheFullBlocks(blocks=blocks, num_cached_blocks=first, num_full_blocks=end):
            null = (NULL_BLOCK,) if NULL_BLOCK in blocks[first:end] else ()
            named.append((action.operation, (*null, *(b for _, b in blocks_to_cache(action)))))
        case CachePartialBlock(block=block) | IsBlockWritable(block=block):
            named.append((action.operation, (block,)))
        case GetCachedBlock():
            named.append((LOOKUP_HIT, _blocks(observation)))
        case MoveBlockHashes(src=src, dst=dst):
            named += [(MOVE_SOURCE, (src,)), (MOVE_DESTINATION, (dst,))]
        case ResetPrefixCache() | GetUsage() | GetNumFreeBlocks() | TakeEvents():
            named.append((action.operation, range(1, before.num_blocks)))
    states = block_states(before)
    return {(row, states[b]) for row, blocks in named for b in blocks}


def _blocks(observation: Observation) -> tuple[int, ...]:
    result = observation.result
    if not isinstance(result, tuple):
        return ()
    return tuple(b for b in result if isinstance(b, int))


@dataclass(frozen=True)
class Drawable:
    """What a run can draw: the profile's contract, the operations both sides have, and
    whether ``free_blocks`` takes ``evict_first``."""

    profile: Profile
    operations: frozenset[str]
    evict_first: bool


#: The pools the exploration runs on: two real blocks put either block in any state while
#: the other one takes part (a shared hold, a move), with caching on and off (a profile
#: may allow something only without caching).
EXPLORED_CONFIGS = (
    PoolConfig(3, enable_caching=True, hash_block_size=1, enable_kv_cache_events=False),
    PoolConfig(3, enable_caching=False, hash_block_size=1, enable_kv_cache_events=False),
)
#: How many steps from a new pool the exploration goes before trying every action (the
#: deepest cell, a partial entry promoted on a held block whose watcher waits, takes four;
#: the tests check that going further finds nothing new).
EXPLORED_DEPTH = 4


@dataclass(frozen=True)
class Witness:
    """The shortest way the exploration found to a cell: a new pool of ``config`` and the
    ``actions`` to run on it, the last of which reaches the cell."""

    config: PoolConfig
    actions: tuple[Action, ...]


def reachable_cells(drawable: Drawable, depth: int = EXPLORED_DEPTH) -> frozenset[Cell]:
    """Every cell some action the contract allows reaches, in every state the explored
    pools reach in up to ``depth`` steps from new."""
    return frozenset(witnesses(drawable, depth))


def unrefused(refusals: Mapping[str, int], drawable: Drawable) -> list[str]:
    """The rules some call can break in the explored pools that a run never saw refused."""
    return sorted(r for r in refusal_witnesses(drawable) if not refusals.get(r, 0))


def witnesses(drawable: Drawable, depth: int = EXPLORED_DEPTH) -> Mapping[Cell, Witness]:
    """Each reachable cell with the shortest action sequence found reaching it (explored
    breadth first, so no shorter one exists within the explored pools)."""
    return _explore(drawable, depth)[0]


def refusal_witnesses(drawable: Drawable, depth: int = EXPLORED_DEPTH) -> Mapping[str, Witness]:
    """Each rule a call can break in the explored pools, with the shortest sequence found
    that ends with a call breaking it (the calls before it inside the contract)."""
    return _explore(drawable, depth)[1]


@lru_cache(maxsize=16)
def _explore(drawable: Drawable, depth: int) -> tuple[dict[Cell, Witness], dict[str, Witness]]:
    found: dict[Cell, Witness] = {}
    refusals: dict[str, Witness] = {}
    for config in EXPLORED_CONFIGS:
        start = initial_state(config, drawable.profile)
        seen = {_fingerprint(start)}
        frontier: deque[tuple[PoolState, tuple[Action, ...]]] = deque([(start, ())])
        while frontier:
            state, path = frontier.popleft()
            for action in alphabet(state, drawable) + out_of_contract(state, drawable):
                try:
                    after, observation = step(state, action)
                except ContractViolation as broken:
                    if broken.rule not in refusals:  # breadth first: the first is shortest
                        refusals[broken.rule] = Witness(config, (*path, action))
                    continue
                for cell in cells(state, action, observation):
                    known = found.get(cell)
                    if known is None or len(known.actions) > len(path) + 1:
                        found[cell] = Witness(config, (*path, action))
                key = _fingerprint(after)
                if len(path) < depth and key not in seen:
                    seen.add(key)
                    frontier.append((after, (*path, action)))
    return found, refusals


def out_of_contract(state: PoolState, drawable: Drawable) -> list[Action]:
    """Calls that break a rule :func:`alphabet`'s calls cannot: too many or negative blocks
    asked for, a block released once more than it is held, an id past the pool, a partial
    entry of no tokens, a block larger than the request's hashes cover (and, where the
    profile hashes at the block size, a block size other than the hash block size)."""
    n = state.num_blocks
    request = (b"\x00\x01", b"\x00\x02")
    actions: list[Action] = [
        GetNewBlocks(len(state.free_queue) + 1),
        GetNewBlocks(-1),
        EvictBlocks((n,)),
        IsBlockWritable(n),
    ]
    for b in range(n):
        actions += [
            FreeBlocks((b,) * (state.ref_cnt[b] + 1)),
            CachePartialBlock(request, b, 0, 0, 2),
            CacheFullBlocks(request, (b,), 0, 1, 3),
        ]
    return [a for a in actions if a.operation in drawable.operations]


def alphabet(state: PoolState, drawable: Drawable) -> list[Action]:
    """Each operation the run can draw, on each block of ``state`` (the null block too):
    the cache calls with one request per block, two hashes long, so that a block can be
    cached partly and then promoted; lookups of every key cached."""
    every = range(state.num_blocks)
    actions: list[Action] = [GetNewBlocks(n) for n in range(len(state.free_queue) + 1)]
    actions += [ResetPrefixCache(), GetUsage(), GetNumFreeBlocks(), TakeEvents()]
    for b in every:
        request = (bytes([b, 1]), bytes([b, 2]))
        actions += [
            FreeBlocks((b,)),
            Touch((b,)),
            UnpinBlocks((b,), "w1"),
            CacheFullBlocks(request, (b,), 0, 1, 1),
            CacheFullBlocks(request, (b,), 0, 1, 2),
            CachePartialBlock(request, b, 1, 0, 2),
            CachePartialBlock(request, b, 1, 0, 2, replace_existing_hashes=True),
            EvictBlocks((b,)),
            IsBlockWritable(b),
        ]
        if drawable.evict_first:
            actions.append(FreeBlocks((b,), evict_first=True))
        actions += [MoveBlockHashes(b, dst) for dst in every]
    actions += [GetCachedBlock(hash_of(key), (group_of(key),)) for key in sorted(state.cache)]
    return [a for a in actions if a.operation in drawable.operations]


def _fingerprint(state: PoolState) -> Hashable:
    return (
        state.ref_cnt,
        state.free_queue,
        state.primary,
        state.extra,
        tuple(sorted(state.cache.items())),
        tuple(sorted(state.watchers.items())),
    )


def missed(counts: Mapping[Cell, int], drawable: Drawable) -> list[Cell]:
    """The reachable cells a run that reached ``counts`` never reached, in table order."""
    reachable = reachable_cells(drawable)
    return [
        (row, column)
        for row in ROWS
        for column in BLOCK_STATES
        if (row, column) in reachable and not counts.get((row, column), 0)
    ]
