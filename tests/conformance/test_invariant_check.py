"""The spec's invariants checked on what a step changed (:mod:`...engine.invariant_check`):
the fields each invariant reads are all listed, and a broken invariant is still named."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from kvpool.conformance.machines.pool import draw
from kvpool.conformance.machines.pool.invariant_check import FIELDS, READS, broken_since
from kvpool.conformance.machines.pool.levels import LEVELS
from kvpool.conformance.machines.pool.machine import next_action
from kvpool.conformance.machines.pool.operations import POOL_OPERATIONS
from kvpool.conformance.search.choices import RandomChoices
from kvpool.spec import PoolState, broken_invariants, get_profile, initial_state, step, violation
from kvpool.spec.invariants import INVARIANTS


class Recording(PoolState):
    """A pool state that notes which of its fields are read (its properties and methods
    read them through it)."""

    def __getattribute__(self, name: str) -> Any:
        if name in FIELDS:
            object.__getattribute__(self, "seen").add(name)
        return object.__getattribute__(self, name)


def recording(state: PoolState) -> Recording:
    copy = Recording.__new__(Recording)
    for name in FIELDS:
        object.__setattr__(copy, name, getattr(state, name))
    object.__setattr__(copy, "seen", set())
    return copy


def reached_states() -> Iterator[PoolState]:
    """The states runs of the spec reach at every level's draws, peers and events included."""
    profile = get_profile("seed")
    operations = frozenset(op.name for op in POOL_OPERATIONS) | {"free_blocks:evict_first"}
    for level in ("safety", "robustness", "events"):
        choices = RandomChoices(f"invariant reads {level}")
        for _ in range(40):
            state = initial_state(draw.pool_config(choices, 6, level == "robustness"), profile)
            ctx = draw.Context(evict_first=True, peer=True, for_events=level == "events")
            for _ in range(30):
                yield state
                action = next_action(choices, state, ctx, operations, LEVELS[level])
                if action is not None and violation(state, action) is None:
                    state, _ = step(state, action)


def test_every_field_an_invariant_reads_is_listed() -> None:
    assert set(READS) == set(INVARIANTS)
    read: dict[str, set[str]] = {name: set() for name in INVARIANTS}
    peers = 0
    for state in reached_states():
        peers += state.peer is not None
        for name, holds in INVARIANTS.items():
            watched = recording(state)
            assert holds(watched), (name, state)
            read[name] |= watched.seen
    assert peers  # the peer-consistent invariant went past its first test
    assert read == {name: set(fields) for name, fields in READS.items()}


def test_a_broken_invariant_is_named_when_its_field_changed() -> None:
    held = initial_state(draw.pool_config(RandomChoices("broken"), 6, False), get_profile("seed"))
    assert broken_since(held, held) == []
    negative = replace(held, ref_cnt=(0, -1, *held.ref_cnt[2:]))
    assert broken_since(held, negative) == broken_invariants(negative) != []
    twice = replace(held, free_queue=(*held.free_queue, held.free_queue[0]))
    assert "queue-holds-each-once" in broken_since(held, twice)
    stray = replace(held, cache={b"k" * 36: (1,)})
    assert broken_since(held, stray) == broken_invariants(stray) != []
    assert broken_since(None, stray) == broken_invariants(stray)
