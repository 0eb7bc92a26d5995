"""The consumer models: each property caught on a stream that breaks it, none on one that
keeps it, under both models."""

from __future__ import annotations

import pytest
from kvpool.spec import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    CacheFullBlocks,
    FreeBlocks,
    GetNewBlocks,
    PoolConfig,
    ResetPrefixCache,
    apply_event,
    apply_events,
    consumer_violations,
    initial_state,
    new_consumer,
    pool_residency,
    pool_violations,
    step,
)
from kvpool.spec.consumer import EVENT_PROPERTIES, residency_of_keys
from kvpool.spec.keys import make_key

A, B, C = b"a" * 8, b"b" * 8, b"c" * 8


def stored(*hashes: bytes, parent: bytes | None = None, group: int = 0) -> BlockStored:
    return BlockStored(hashes, parent, group, 1, len(hashes))


def ids(violations: tuple[object, ...]) -> list[str]:
    return [v.property for v in violations]  # type: ignore[attr-defined]


@pytest.mark.parametrize("model", ["count", "set"])
def test_a_chained_request_breaks_nothing(model: str) -> None:
    state, found = apply_events(
        new_consumer(model), [stored(A), stored(B, C, parent=A), BlockRemoved(C, 0)]
    )
    assert found == ()
    assert state.residency() == {(0, A): 1, (0, B): 1}
    assert pool_violations(state, {(0, A): 1, (0, B): 1}) == ()


@pytest.mark.parametrize("model", ["count", "set"])
def test_unknown_parent(model: str) -> None:
    _, found = apply_event(new_consumer(model), stored(B, parent=A))
    assert ids(found) == ["events-parent-known"]
    assert found[0].block_hash == A
    # the parent in another group or medium is not placeable either
    state, _ = apply_event(new_consumer(model), stored(A, group=1))
    assert ids(apply_event(state, stored(B, parent=A))[1]) == ["events-parent-known"]
    state, _ = apply_event(new_consumer(model), stored(A), medium="CPU")
    assert ids(apply_event(state, stored(B, parent=A), medium="GPU")[1]) == ["events-parent-known"]


@pytest.mark.parametrize("model", ["count", "set"])
def test_removal_of_a_hash_not_held(model: str) -> None:
    state, found = apply_events(new_consumer(model), [stored(A), BlockRemoved(A, 0)])
    assert found == ()
    _, found = apply_event(state, BlockRemoved(A, 0))
    assert ids(found) == ["events-removed-known"]
    assert (found[0].block_hash, found[0].group_id) == (A, 0)


def test_duplicate_copies_count_and_set() -> None:
    """Two copies stored, one removed: the count consumer keeps the hash, the set one loses
    it (the duplicate-copy removal); the second removal is unknown to the set consumer."""
    stream = [stored(A), stored(A), BlockRemoved(A, 0)]
    count, found_count = apply_events(new_consumer("count"), stream)
    kept, found_set = apply_events(new_consumer("set"), stream)
    assert found_count == found_set == ()
    assert count.copies(A, 0) == 1 and kept.copies(A, 0) == 0
    lost = consumer_violations(kept, count)
    assert ids(lost) == ["events-replay-index"] and "lost" in lost[0].message
    assert consumer_violations(count, count) == ()
    assert ids(pool_violations(kept, {(0, A): 1})) == ["events-replay-index"]
    assert pool_violations(count, {(0, A): 1}) == ()
    assert ids(apply_event(kept, BlockRemoved(A, 0))[1]) == ["events-removed-known"]
    assert apply_event(count, BlockRemoved(A, 0))[1] == ()


def test_replay_index_counts_copies_only_for_count() -> None:
    count, _ = apply_event(new_consumer("count"), stored(A))
    kept, _ = apply_event(new_consumer("set"), stored(A))
    assert ids(pool_violations(count, {(0, A): 2})) == ["events-replay-index"]
    assert pool_violations(kept, {(0, A): 2}) == ()
    assert ids(pool_violations(count, {})) == ["events-replay-index"]
    assert ids(pool_violations(kept, {})) == ["events-replay-index"]


@pytest.mark.parametrize("model", ["count", "set"])
def test_cleared_pool_keeping_keys(model: str) -> None:
    state, _ = apply_events(new_consumer(model), [stored(A), AllBlocksCleared(), stored(B)])
    assert state.residency() == {(0, B): 1} and state.clears_seen == 1
    assert pool_violations(state, {(0, B): 1}, cleared=True) == ()
    found = pool_violations(state, {(0, A): 1, (0, B): 1}, cleared=True)
    assert ids(found) == ["events-cleared-empty"] and found[0].block_hash == A
    # without a clear in the window the same difference is a replay mismatch
    assert ids(pool_violations(state, {(0, A): 1, (0, B): 1})) == ["events-replay-index"]


def test_clear_keeps_other_media() -> None:
    state, _ = apply_event(new_consumer("count"), stored(A), medium="CPU")
    state, _ = apply_event(state, AllBlocksCleared())
    assert state.copies(A, 0, "CPU") == 1


def test_apply_is_pure() -> None:
    state = new_consumer("count")
    apply_event(state, stored(A))
    assert state.held == {} and state.events_seen == 0


def test_unknown_model() -> None:
    with pytest.raises(ValueError, match="count, set"):
        new_consumer("bag")


def test_pool_residency_counts_blocks_per_key() -> None:
    """The spec pool caching one hash in two blocks holds it twice; its events replay to it."""
    pool = initial_state(PoolConfig(num_gpu_blocks=4))
    pool, _ = step(pool, GetNewBlocks(2))
    for b in (1, 2):
        pool, _ = step(pool, CacheFullBlocks((A,), (b,), 0, 1, 1))
    assert pool_residency(pool) == {(0, A): 2}
    assert residency_of_keys([make_key(A, 0), make_key(A, 0)]) == {(0, A): 2}
    count, found = apply_events(new_consumer("count"), pool.events)
    assert found == () and pool_violations(count, pool_residency(pool)) == ()
    taken = len(pool.events)
    pool, _ = step(pool, FreeBlocks((1, 2)))
    pool, _ = step(pool, ResetPrefixCache())
    assert pool.events[taken:] == (AllBlocksCleared(),)
    count, found = apply_events(count, pool.events[taken:])
    assert found == () and count.held == {}
    assert pool_violations(count, pool_residency(pool), cleared=True) == ()


def test_every_property_is_described() -> None:
    assert set(EVENT_PROPERTIES) == {
        "events-parent-known",
        "events-parent-chain",
        "events-removed-known",
        "events-replay-index",
        "events-cleared-empty",
        "router-recall",
        "router-copies",
        "router-precision",
    }
    assert all(text and text[0].islower() for text in EVENT_PROPERTIES.values())


def test_a_lookup_is_served_up_to_the_first_missing_block() -> None:
    from dataclasses import replace

    from kvpool.spec.consumer import served_blocks

    empty = initial_state(PoolConfig(4))
    pool = replace(empty, cache={make_key(A, 0): (1,), make_key(B, 0): (2, 3)})
    assert served_blocks(pool, [A, B], 0) == 2
    assert served_blocks(pool, [B, A], 0) == 2
    assert served_blocks(pool, [A, C, B], 0) == 1
    assert served_blocks(pool, [A, B], 1) == 0
    assert served_blocks(pool, [], 0) == 0


def test_a_link_to_any_page_but_the_one_before_breaks_the_chain() -> None:
    from kvpool.spec.consumer import chain_violations

    # the pool holds the sequence A, B, C; the stream stores A, then B and C after A
    parents = {(0, A): None, (0, B): A, (0, C): B}
    kept = (
        BlockStored((A,), None, group_id=0, block_size=1, num_tokens=1),
        BlockStored((B, C), A, group_id=0, block_size=1, num_tokens=2),
    )
    assert chain_violations(kept, parents) == ()
    skips = BlockStored((C,), A, group_id=0, block_size=1, num_tokens=1)  # B left out
    (broken,) = chain_violations((skips,), parents)
    assert broken.property == "events-parent-chain" and broken.block_hash == C
    assert "after hash " in broken.message
    rooted = BlockStored((B,), None, group_id=0, block_size=1, num_tokens=1)
    (broken,) = chain_violations((rooted,), parents)
    assert "to parent none" in broken.message
    # a page the pool no longer holds is not judged
    assert chain_violations((skips,), {(0, A): None}) == ()
