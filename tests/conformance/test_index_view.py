"""The prefix-cache index in the view: read from every vLLM layout, probed through lookups
where it is hidden, compared with the spec's; and drawing that remembers dropped keys."""

from __future__ import annotations

from collections import Counter

import pytest
from kvpool.conformance.machines.pool import draw
from kvpool.conformance.machines.pool.compare import compare_lookups
from kvpool.conformance.machines.pool.levels import ORDER
from kvpool.conformance.machines.pool.lockstep import replay
from kvpool.conformance.search.choices import RandomChoices
from kvpool.conformance.targets.index_probe import IndexProbe
from kvpool.conformance.targets.loading import choose_profile, load_target
from kvpool.spec import (
    CacheFullBlocks,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    PoolConfig,
    ResetPrefixCache,
    initial_state,
    step,
)
from kvpool.spec.keys import make_key
from kvpool.spec.profile import SEED, get_profile

A, B = b"\xaa" * 32, b"\xbb" * 32
KEY_A, KEY_B = make_key(A, 0), make_key(B, 0)
#: Key A cached on blocks 1 then 2 (a duplicate), key B on block 3.
DUPLICATES = (
    GetNewBlocks(3),
    CacheFullBlocks((A,), (1,), 0, 1, 1, 0),
    CacheFullBlocks((A,), (2,), 0, 1, 1, 0),
    CacheFullBlocks((A, B), (1, 3), 1, 2, 1, 0),
)


@pytest.mark.parametrize("version", ["0.10.2", "0.24.0", "0.30.0", "0.33.0"])
def test_every_release_layout_is_read_in_lookup_order(version: str) -> None:
    spec = f"vllm=={version}"
    factory, _ = load_target(spec)
    profile = get_profile(choose_profile(spec).name)
    target = factory(PoolConfig(5), profile)
    assert "index" in target.observes
    for action in DUPLICATES:
        target.apply(action)
    assert target.view().index == ((KEY_A, (1, 2)), (KEY_B, (3,)))
    # and the lockstep run agrees with the spec on every step, evictions included
    actions = (*DUPLICATES, EvictBlocks((1,)), GetCachedBlock(A, (0,)), EvictBlocks((2, 3)))
    message, _ = replay(factory, profile, ORDER, PoolConfig(5), actions)
    assert message is None


def test_a_lookup_answering_for_a_key_no_block_carries_names_the_rule() -> None:
    cache = {KEY_A: (1, 2)}
    assert compare_lookups(cache, ((KEY_A, 1), (KEY_B, None)), exact_order=True) == []
    [stale] = compare_lookups(cache, ((KEY_B, 3),), exact_order=False)
    assert "get_cached_block of key" in stale and "returned block 3, but no block carries" in stale
    assert "'map-matches-block-keys'" in stale
    [missed] = compare_lookups(cache, ((KEY_A, None),), exact_order=False)
    assert "missed, but blocks [1, 2] carry it" in missed


def test_the_order_of_duplicates_counts_only_where_the_order_is_exact() -> None:
    cache = {KEY_A: (1, 2)}
    assert compare_lookups(cache, ((KEY_A, 2),), exact_order=False) == []
    [later] = compare_lookups(cache, ((KEY_A, 2),), exact_order=True)
    assert "returned block 2, expected one of blocks [1]" in later


def test_a_probe_remembers_a_bounded_number_of_keys_newest_kept() -> None:
    probe = IndexProbe(limit=3)
    probe.remember([b"k1", b"k2", b"k1", b"k3", b"k4"])
    assert probe.keys == {b"k2", b"k3", b"k4"}
    answers = {b"k3": 7}
    assert probe.probe(answers.get, skip=[b"k4"]) == ((b"k2", None), (b"k3", 7))


def test_the_spec_lookup_changes_nothing() -> None:
    state = initial_state(PoolConfig(5), SEED)
    for action in DUPLICATES:
        state = step(state, action)[0]
    after, observation = step(state, GetCachedBlock(A, (0, 0)))
    assert after == state and observation.result == (1, 1)


def test_drawing_remembers_the_keys_blocks_left() -> None:
    ctx = draw.Context(evict_first=False, peer=False)
    state = initial_state(PoolConfig(5), SEED)
    for action in (*DUPLICATES, EvictBlocks((1,)), FreeBlocks((1, 2, 3)), ResetPrefixCache()):
        ctx.observe(state)
        state = step(state, action)[0]
    ctx.observe(state)
    # block 1 left key A (evicted), then the reset dropped A (block 2) and B (block 3)
    assert ctx.dropped == [KEY_A, KEY_B] and ctx.just_dropped
    for n in range(draw.DROPPED_KEYS + 5):
        ctx.dropped.append(make_key(bytes([n]) * 32, 0))
    ctx.observe(state)
    assert len(ctx.dropped) == draw.DROPPED_KEYS and not ctx.just_dropped


def test_a_third_of_the_drawn_lookups_ask_for_a_dropped_key() -> None:
    choices = RandomChoices("lookups")
    ctx = draw.Context(evict_first=False, peer=False)
    state = step(initial_state(PoolConfig(5), SEED), DUPLICATES[0])[0]
    state = step(state, DUPLICATES[1])[0]  # key A cached on block 1
    ctx.dropped = [KEY_B]
    drawn = [draw.draw_get_cached_block(choices, state, ctx) for _ in range(600)]
    asked = Counter(make_key(a.block_hash, a.group_ids[0]) for a in drawn)
    assert 0.25 < asked[KEY_B] / len(drawn) < 0.45
    assert 0.4 < asked[KEY_A] / len(drawn) < 0.6


def test_a_duplicate_of_a_cached_key_is_drawn_on_an_unkeyed_held_block() -> None:
    choices = RandomChoices("duplicate")
    ctx = draw.Context(evict_first=False, peer=False)
    ctx.requests.append((B, A))
    state = initial_state(PoolConfig(5), SEED)
    for action in (GetNewBlocks(3), CacheFullBlocks((B, A), (1, 2), 0, 2, 1, 0)):
        state = step(state, action)[0]
    duplicate = draw.draw_duplicate(choices, state, ctx)
    assert isinstance(duplicate, CacheFullBlocks) and duplicate.blocks[-1] == 3
    after = step(state, duplicate)[0]
    assert any(len(blocks) == 2 for blocks in after.cache.values())
    # no unkeyed held block: nothing to draw
    assert draw.draw_duplicate(choices, after, ctx) is None
