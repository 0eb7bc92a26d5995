"""Each invariant holds on initial states and fails on a hand-broken state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from kvpool.spec import (
    INVARIANTS,
    AllBlocksCleared,
    CacheFullBlocks,
    GetNewBlocks,
    PoolConfig,
    PoolState,
    PrimaryKey,
    broken_invariants,
    initial_state,
    invariants_hold,
    step,
)
from kvpool.spec.keys import make_key

KEY = make_key(b"\x01" * 32, 0)
OTHER = make_key(b"\x02" * 32, 0)

CONFIGS = [
    PoolConfig(num_gpu_blocks=1),
    PoolConfig(num_gpu_blocks=2),
    PoolConfig(num_gpu_blocks=8, hash_block_size=4),
    PoolConfig(num_gpu_blocks=5, enable_caching=False, enable_kv_cache_events=False),
    PoolConfig(num_gpu_blocks=4, peer_blocks=3),
]


@pytest.mark.parametrize("config", CONFIGS, ids=repr)
def test_every_invariant_holds_on_an_initial_state(config: PoolConfig) -> None:
    state = initial_state(config)
    assert broken_invariants(state) == []
    assert invariants_hold(state)


def base() -> PoolState:
    """Blocks 1, 2 held, 1 cached under KEY; 3, 4 free."""
    state = initial_state(PoolConfig(num_gpu_blocks=5))
    state, _ = step(state, GetNewBlocks(2))
    state, _ = step(state, CacheFullBlocks((KEY[:-4],), (1,), 0, 1, 1))
    assert broken_invariants(state) == []
    return state


def _with_peer_broken() -> PoolState:
    state = initial_state(PoolConfig(num_gpu_blocks=4, peer_blocks=3))
    assert state.peer is not None
    bad_peer = replace(state.peer, ref_cnt=(0, 1, 0))  # peer block 1 held yet free
    return replace(state, peer=bad_peer)


def _caching_off_with_key() -> PoolState:
    state = initial_state(PoolConfig(num_gpu_blocks=3, enable_caching=False))
    return replace(
        state,
        ref_cnt=(0, 1, 0),
        free_queue=(2,),
        primary=(None, PrimaryKey(KEY, 1), None),
        cache={KEY: (1,)},
    )


BREAKERS: dict[str, Callable[[], PoolState]] = {
    # a held block left in the queue
    "free-iff-unreferenced": lambda: replace(base(), free_queue=(3, 4, 2)),
    # a free block queued twice (counts still consistent as sets)
    "queue-holds-each-once": lambda: replace(base(), free_queue=(3, 4, 3)),
    # the map names block 2 under a key the block does not carry
    "map-matches-block-keys": lambda: replace(base(), cache={KEY: (1, 2)}),
    # block 2 has an extra key but no primary
    "extra-keys-need-primary": lambda: replace(
        base(), extra=(frozenset(), frozenset(), frozenset({OTHER}), frozenset(), frozenset())
    ),
    # the null block's count moved
    "null-block-inert": lambda: replace(base(), ref_cnt=(-1, 1, 1, 0, 0)),
    "no-keys-without-caching": _caching_off_with_key,
    "no-events-when-disabled": lambda: replace(
        initial_state(PoolConfig(num_gpu_blocks=2, enable_kv_cache_events=False)),
        events=(AllBlocksCleared(),),
    ),
    # a watcher on a block id the pool does not have
    "watchers-on-real-blocks": lambda: replace(base(), watchers={5: "w"}),
    "peer-consistent": _with_peer_broken,
}


@pytest.mark.parametrize("name", sorted(BREAKERS))
def test_hand_broken_state_fails_its_invariant(name: str) -> None:
    bad = BREAKERS[name]()
    assert INVARIANTS[name](bad) is False
    assert name in broken_invariants(bad)
    assert not invariants_hold(bad)


def test_every_invariant_has_a_breaking_case() -> None:
    assert set(BREAKERS) == set(INVARIANTS)


def test_null_block_in_queue_breaks_null_inertness() -> None:
    state = initial_state(PoolConfig(num_gpu_blocks=3))
    bad = replace(state, free_queue=(0, 1, 2))
    assert not INVARIANTS["null-block-inert"](bad)


def test_extra_key_equal_to_primary_is_rejected() -> None:
    state = base()
    bad = replace(
        state, extra=(frozenset(), frozenset({KEY}), frozenset(), frozenset(), frozenset())
    )
    assert not INVARIANTS["extra-keys-need-primary"](bad)
