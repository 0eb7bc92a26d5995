"""The Z3 encoding and the executable spec must not drift: random action sequences run
through ``kvpool.spec.step`` and through the encoded transition relation (Z3 asked for the
state after each concrete action) agree on the contract and on every state, step by step.

Covered (the seed profile, caching on, one token per hash block, events off):
``get_new_blocks``; ``free_blocks`` of 1-2 blocks, with and without ``evict_first``;
``touch`` and ``unpin_blocks`` of 1-2 blocks; ``cache_full_blocks`` of one block;
``cache_partial_block`` at 1 or 2 tokens (``block_size`` 2: inside a block and at its
boundary), with and without ``replace_existing_hashes``, the null block included;
``evict_blocks`` of one block; ``move_block_hashes`` (any src, dst); ``reset_prefix_cache``.
Compared after each step: the contract's verdict, ref counts, the free queue in order,
its length, primary keys, every key of each block, the multimap (as sets: the spec's
order of duplicates under a key is not encoded) and which blocks have a reuse watcher
(not its name: the encoding keeps only whether there is one).

Not covered: ``cache_full_blocks`` of several blocks or with earlier cached blocks, and a
full block's ``block_size`` above one hash block (the bounded pool's step caches one block
at one token); ``get_cached_block`` and the other queries (they change nothing);
``free_blocks`` with foreign (peer) blocks (the encoding has one pool); events (not
encoded).
"""

from __future__ import annotations

import random
import time

import pytest
from kvpool.conformance.proofs.bmc import concrete_run, key_hash, pool_config
from kvpool.spec import (
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetNewBlocks,
    MoveBlockHashes,
    ResetPrefixCache,
    Touch,
    UnpinBlocks,
    initial_state,
    step,
    violation,
)
from kvpool.spec.actions import Action
from kvpool.spec.state import PoolState

BLOCKS, KEYS = 4, 2
KINDS = [
    "get",
    "get",
    "free1",
    "free2",
    "free1_ef",
    "free2_ef",
    "touch1",
    "touch2",
    "unpin1",
    "unpin2",
    "cache",
    "cache",
    "partial",
    "partial",
    "evict",
    "move",
    "reset",
]


def pick(rng: random.Random, candidates: list[int]) -> int:
    """Mostly one of ``candidates`` (so most actions are in contract), else any block (so
    the contracts' refusals are compared too)."""
    if candidates and rng.random() < 0.8:
        return rng.choice(candidates)
    return rng.randrange(BLOCKS)


def draw(rng: random.Random, state: PoolState) -> Action:
    kind = rng.choice(KINDS)
    held = [b for b in range(1, BLOCKS) if state.ref_cnt[b] > 0]
    keyed = [b for b in range(1, BLOCKS) if state.keys_of(b)]
    unkeyed = [b for b in range(1, BLOCKS) if not state.keys_of(b)]
    x = pick(rng, keyed if kind.startswith("touch") or kind == "move" else held)
    y = pick(rng, unkeyed if kind == "move" else keyed if kind.startswith("touch") else held)
    if kind == "get":
        return GetNewBlocks(rng.randint(0, len(state.free_queue)) if rng.random() < 0.8 else 3)
    if kind.startswith("free"):
        blocks = (x,) if kind.startswith("free1") else (x, y)
        return FreeBlocks(blocks, evict_first=kind.endswith("_ef"))
    if kind == "touch1":
        return Touch((x,))
    if kind == "touch2":
        return Touch((x, y))
    if kind == "unpin1":
        return UnpinBlocks((x,), "w")
    if kind == "unpin2":
        return UnpinBlocks((x, y), "w")
    if kind == "cache":
        # the null block is left out: the spec skips it, the bounded pool has no such step
        block = pick(rng, [b for b in held if b not in keyed]) or 1
        return CacheFullBlocks((key_hash(rng.randint(1, KEYS)),), (block,), 0, 1, 1, 0)
    if kind == "partial":
        tokens = rng.randint(1, 2)
        hashes = (bytes([9]) * 8,) * (tokens - 1) + (key_hash(rng.randint(1, KEYS)),)
        return CachePartialBlock(hashes, x, tokens, 0, 2, rng.random() < 0.3)
    if kind == "evict":
        return EvictBlocks((x,))
    if kind == "move":
        return MoveBlockHashes(x, y)
    return ResetPrefixCache()


K1, K2 = key_hash(1), key_hash(2)

#: Hand-written runs where each further action shows what it does (the random runs may
#: not): name -> actions.
DIRECTED: dict[str, list[Action]] = {
    # a keyed block freed with evict_first goes to the front (without it: the back)
    "free-evict-first": [
        GetNewBlocks(3),
        CacheFullBlocks((K1,), (1,), 0, 1, 1, 0),
        CacheFullBlocks((K2,), (2,), 0, 1, 1, 0),
        FreeBlocks((3,)),
        FreeBlocks((1,), evict_first=True),
        FreeBlocks((2, 2)),  # over-release: refused
        FreeBlocks((2,), evict_first=True),
        GetNewBlocks(1),
    ],
    # unpinned blocks go to the back whatever their key, keep a watcher, are reusable
    "unpin": [
        GetNewBlocks(3),
        Touch((2,)),
        UnpinBlocks((1, 2), "w"),
        UnpinBlocks((0,), "w"),  # the null block: refused
        FreeBlocks((3,)),
        UnpinBlocks((2,), "w"),
        GetNewBlocks(2),
    ],
    # partial entries: primary, extra at the same length, stripped by a longer one,
    # replace_existing_hashes, then moved to a fresh block
    "partial-and-move": [
        GetNewBlocks(3),
        CachePartialBlock((K1,), 1, 1, 0, 2),
        CachePartialBlock((K2,), 1, 1, 0, 2),
        CachePartialBlock((K2, K1), 1, 2, 0, 2),
        CachePartialBlock((K2,), 2, 1, 0, 2),
        CachePartialBlock((K1,), 2, 1, 0, 2, True),
        CachePartialBlock((K1,), 0, 1, 0, 2),  # the null block: nothing
        MoveBlockHashes(1, 3),
        MoveBlockHashes(2, 3),  # dst keyed now: refused
        MoveBlockHashes(3, 0),  # dst null: refused
        MoveBlockHashes(2, 1),
        FreeBlocks((1, 2)),
        FreeBlocks((3,)),
    ],
}


def random_run(seed: int) -> list[Action]:
    rng = random.Random(seed)
    actions = []
    state = initial_state(pool_config(BLOCKS))
    for _ in range(20):  # drawn from the spec's states, checked against the encoding
        actions.append(draw(rng, state))
        if violation(state, actions[-1]) is None:
            state, _ = step(state, actions[-1])
    return actions


RUNS = {f"seed{seed}": random_run(seed) for seed in range(8)} | DIRECTED


@pytest.mark.parametrize("run", sorted(RUNS))
def test_encoding_and_spec_agree_step_by_step(run: str) -> None:
    actions = RUNS[run]
    encoded = concrete_run(BLOCKS, KEYS, actions)
    state = initial_state(pool_config(BLOCKS))
    key_ids = {key_hash(k) + bytes(4): k for k in range(1, KEYS + 1)}
    allowed_steps = 0
    for i, (action, got) in enumerate(zip(actions, encoded, strict=True), 1):
        where = f"step {i} {action}"
        refused = violation(state, action)
        assert got.allowed == (refused is None), f"{where}: contract differs ({refused})"
        if refused is None:
            allowed_steps += 1
            state, _ = step(state, action)
        assert got.ref_cnt[1:] == state.ref_cnt[1:], where
        assert got.free_queue == state.free_queue, where
        assert got.nfree == len(state.free_queue), where
        primary = {b: key_ids[p.key] for b, p in enumerate(state.primary) if p is not None}
        assert got.primary == primary, where
        keys = {
            b: frozenset(key_ids[k] for k in state.keys_of(b))
            for b in range(BLOCKS)
            if state.keys_of(b)
        }
        assert got.keys == keys, where
        cache = {key_ids[k]: frozenset(bs) for k, bs in state.cache.items()}
        assert got.cache == cache, where
        assert got.watchers == frozenset(state.watchers), where
    assert allowed_steps >= 3  # the sequence did something (every kind: the test below)


def test_every_drawn_kind_occurs_and_is_allowed_somewhere() -> None:
    """The random sequences exercise each action kind in contract at least once."""
    seen: set[str] = set()
    for seed in range(8):
        rng = random.Random(seed)
        state = initial_state(pool_config(BLOCKS))
        for _ in range(20):
            action = draw(rng, state)
            if violation(state, action) is None:
                name = type(action).__name__
                if isinstance(action, FreeBlocks) and action.evict_first:
                    name += "(evict_first)"
                if isinstance(action, CachePartialBlock) and action.replace_existing_hashes:
                    name += "(replace)"
                seen.add(name)
                state, _ = step(state, action)
    assert seen >= {
        "GetNewBlocks",
        "FreeBlocks",
        "FreeBlocks(evict_first)",
        "Touch",
        "UnpinBlocks",
        "CacheFullBlocks",
        "CachePartialBlock",
        "EvictBlocks",
        "MoveBlockHashes",
        "ResetPrefixCache",
    }, seen


def test_the_drift_check_is_quick() -> None:
    start = time.perf_counter()
    concrete_run(BLOCKS, KEYS, [GetNewBlocks(2), UnpinBlocks((1,), "w"), MoveBlockHashes(1, 2)])
    assert time.perf_counter() - start < 30
