"""The lifecycle states and transitions come from running the spec, and the diagram draws
exactly what was found."""

from __future__ import annotations

import random
import re

import pytest
from kvpool.conformance.tools.reference import lifecycle
from kvpool.conformance.tools.reference.lifecycle import STATES, Transition, explore, grouped
from kvpool.conformance.tools.reference.lifecycle_svg import (
    _passes_through,
    grid_layout,
    lifecycle_svg,
)
from kvpool.spec import ContractViolation, PoolConfig, UnpinBlocks, initial_state, step
from kvpool.spec.queries import writable


def test_the_exploration_reaches_all_six_states() -> None:
    reached, _ = explore()
    assert reached == {s.id for s in STATES}


@pytest.mark.parametrize(
    ("source", "target", "operation"),
    [
        ("free-unkeyed", "private", "get_new_blocks"),
        ("private", "free-unkeyed", "free_blocks"),
        ("private", "registered", "cache_full_blocks"),
        ("registered", "free-cached", "free_blocks"),
        ("free-cached", "registered", "touch"),
        ("free-cached", "private", "get_new_blocks"),
        ("free-cached", "free-unkeyed", "evict_blocks"),
        ("registered", "shared", "touch"),
        ("shared", "registered", "free_blocks"),
        ("registered", "unpinned", "unpin_blocks"),
        ("unpinned", "private", "get_new_blocks"),
    ],
)
def test_the_transitions_the_design_notes_describe_are_found(
    source: str, target: str, operation: str
) -> None:
    assert Transition(source, target, operation) in explore()[1]


def test_a_change_to_the_spec_changes_what_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a spec whose unpin_blocks refuses everything: the unpinned state disappears."""

    def no_unpin(state, action):  # type: ignore[no-untyped-def]
        if isinstance(action, UnpinBlocks):
            raise ContractViolation("unsupported-action", action.operation)
        return step(state, action)

    monkeypatch.setattr(lifecycle, "step", no_unpin)
    reached, transitions = explore()
    assert "unpinned" not in reached
    assert not any(t.operation == "unpin_blocks" for t in transitions)


def test_the_diagram_draws_one_arrow_per_pair_and_every_state() -> None:
    _, transitions = explore()
    svg = lifecycle_svg(transitions)
    drawn = set(re.findall(r'data-edge="([a-z-]+)->([a-z-]+)"', svg))
    assert drawn == set(grouped(transitions))
    assert set(re.findall(r'data-state="([a-z-]+)"', svg)) == {s.id for s in STATES}
    for operations in grouped(transitions).values():
        for operation in operations:
            assert f">{operation}<" in svg


def test_the_diagram_of_fewer_transitions_draws_fewer_arrows() -> None:
    some = (Transition("free-unkeyed", "private", "get_new_blocks"),)
    svg = lifecycle_svg(some)
    assert re.findall(r'data-edge="([^"]+)"', svg) == ["free-unkeyed->private"]


def test_the_layout_runs_no_arrow_through_a_state() -> None:
    pairs = frozenset(frozenset(p) for p in grouped(explore()[1]))
    where = grid_layout(pairs)
    assert len(set(where.values())) == len(STATES)
    for pair in pairs:
        a, b = (where[s] for s in pair)
        others = [where[s] for s in where if s not in pair]
        assert not any(_passes_through(a, b, c) for c in others), sorted(pair)


def test_the_state_tables_columns_agree_with_the_states_the_spec_reaches() -> None:
    """The table's words (ref_cnt, key, in queue, writable) hold for every block in every
    state a random walk reaches, so the hand-written columns cannot drift from classify."""
    rng = random.Random(5)
    actions = lifecycle.alphabet(lifecycle.EXPLORED_BLOCKS)
    state = initial_state(PoolConfig(lifecycle.EXPLORED_BLOCKS, enable_kv_cache_events=False))
    seen = set()
    for _ in range(3000):
        try:
            state, _ = step(state, rng.choice(actions))
        except ContractViolation:
            continue
        for b in range(1, state.num_blocks):
            kind = lifecycle.classify(state, b)
            seen.add(kind.id)
            held, keyed = state.ref_cnt[b], state.primary[b] is not None
            assert kind.ref_cnt == (">= 2" if held >= 2 else str(held))
            assert kind.key == "maybe" or (kind.key == "yes") == keyed
            assert kind.in_queue.startswith("yes") == (b in state.free)
            assert kind.writable.startswith("yes") == writable(state, b)
    assert seen == {s.id for s in STATES}
