"""The pool's abstract state: plain values, never mutated.

The free queue is a tuple in eviction order (front = next handed out); as a set it is the
free blocks. Keys live twice, as in every real pool: on the blocks (a primary key with the
number of tokens it covers, plus extra keys) and in the multimap ``cache`` from key to the
blocks cached under it, earliest inserted first. Invariant 3 ties the two together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from .config import PoolConfig
from .events import Event
from .profile import SEED, Profile

#: Block 0 stands for "no data here" in block tables; it is never free, cached or handed out.
NULL_BLOCK = 0

T = TypeVar("T")


@dataclass(frozen=True)
class PrimaryKey:
    """A block's primary key and the number of prefix tokens that key covers."""

    key: bytes
    num_tokens: int


@dataclass(frozen=True)
class PoolState:
    """Everything a block pool remembers."""

    config: PoolConfig
    profile: Profile
    #: Per block; the null block's count is not maintained and stays 0.
    ref_cnt: tuple[int, ...]
    #: The free queue, front first.
    free_queue: tuple[int, ...]
    primary: tuple[PrimaryKey | None, ...]
    extra: tuple[frozenset[bytes], ...]
    #: key -> blocks under that key, earliest inserted first (duplicates are allowed).
    cache: Mapping[bytes, tuple[int, ...]]
    #: block -> name of its reuse watcher, in registration order.
    watchers: Mapping[int, str]
    #: Events not yet taken.
    events: tuple[Event, ...]
    #: The pool whose blocks this one hands back when asked to free them.
    peer: PoolState | None

    @property
    def num_blocks(self) -> int:
        return self.config.num_gpu_blocks

    @property
    def free(self) -> frozenset[int]:
        """The free blocks, as a set."""
        return frozenset(self.free_queue)

    def keys_of(self, block: int) -> tuple[bytes, ...]:
        """All keys of ``block``: the primary first, then the extra ones in byte order."""
        primary = self.primary[block]
        if primary is None:
            return ()
        return (primary.key, *sorted(self.extra[block]))

    def is_held(self, block: int) -> bool:
        return self.ref_cnt[block] >= 1

    def in_range(self, block: int) -> bool:
        return 0 <= block < self.num_blocks


def initial_state(config: PoolConfig, profile: Profile = SEED) -> PoolState:
    """A new pool: every block free in id order, except the null block, no keys."""
    n = config.num_gpu_blocks
    peer = None
    if config.peer_blocks:
        peer_config = replace(config, num_gpu_blocks=config.peer_blocks, peer_blocks=0)
        peer = initial_state(peer_config, profile)
    return PoolState(
        config=config,
        profile=profile,
        ref_cnt=(0,) * n,
        free_queue=tuple(range(1, n)),
        primary=(None,) * n,
        extra=(frozenset(),) * n,
        cache={},
        watchers={},
        events=(),
        peer=peer,
    )


def emit(state: PoolState, *events: Event) -> PoolState:
    """Record ``events``, if this pool publishes events."""
    if not state.config.enable_kv_cache_events or not events:
        return state
    return replace(state, events=state.events + events)


def set_at(values: tuple[T, ...], index: int, value: T) -> tuple[T, ...]:
    """``values`` with one position replaced."""
    return (*values[:index], value, *values[index + 1 :])


def remove_keys(state: PoolState, block: int) -> tuple[PoolState, tuple[bytes, ...]]:
    """Strip every key of ``block`` from the block and the multimap.

    Returns the new state and the keys removed (primary first). Emits nothing: the caller
    decides whether the removal is published.
    """
    removed = state.keys_of(block)
    if not removed:
        return state, ()
    cache = dict(state.cache)
    for key in removed:
        rest = tuple(b for b in cache[key] if b != block)
        if rest:
            cache[key] = rest
        else:
            del cache[key]
    primary = set_at(state.primary, block, None)
    extra = set_at(state.extra, block, frozenset())
    return replace(state, cache=cache, primary=primary, extra=extra), removed


def insert_key(state: PoolState, block: int, key: bytes, num_tokens: int) -> PoolState:
    """Cache ``block`` under ``key``; the newest duplicate goes last.

    Nothing happens if ``block`` already sits under ``key``. A block without a primary key
    takes ``key`` as its primary (covering ``num_tokens``); otherwise ``key`` is an extra key.
    """
    if block in state.cache.get(key, ()):
        return state
    cache = dict(state.cache)
    cache[key] = (*cache.get(key, ()), block)
    if state.primary[block] is None:
        primary = set_at(state.primary, block, PrimaryKey(key, num_tokens))
        return replace(state, cache=cache, primary=primary)
    extra = set_at(state.extra, block, state.extra[block] | {key})
    return replace(state, cache=cache, extra=extra)


def fire_watchers(
    state: PoolState, blocks: Iterable[int]
) -> tuple[PoolState, tuple[tuple[int, str], ...]]:
    """Fire and drop the reuse watchers of ``blocks``, in that order."""
    watchers = dict(state.watchers)
    fired = tuple((b, watchers.pop(b)) for b in blocks if b in watchers)
    if not fired:
        return state, ()
    return replace(state, watchers=watchers), fired
