"""Generating the corpus: for every profile, every level and every operation, a seeded walk
of the spec that ends in that operation; plus the invariant-edge scenarios. Seeds are the
vector's own path, so the corpus is byte-identical on every run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from kvpool.spec import (
    PROFILES,
    Action,
    PoolConfig,
    PoolState,
    Profile,
    initial_state,
    step,
    violation,
)

from ...machines.pool import draw
from ...machines.pool import operations as table
from ...machines.pool.levels import LEVELS, Level
from ...machines.pool.machine import kinds, next_action
from ...search.choices import RandomChoices
from ...trace.files import dumps
from ...trace.model import Trace, TraceMeta
from ...trace.record import record
from .owned import Written, write_owned
from .scenarios import SCENARIOS

#: Walks per (profile, level, operation): more for the seed profile, the contract itself.
WALKS = {"seed": 4}
OTHER_WALKS = 1
#: Actions before the one under test, at most.
LEAD = 10


def random_config(choices: RandomChoices) -> PoolConfig:
    return PoolConfig(
        num_gpu_blocks=choices.integer(2, 7, "num_gpu_blocks"),
        enable_caching=choices.choice([True, True, True, False], "caching"),
        hash_block_size=choices.choice([1, 2], "hash_block_size"),
        enable_kv_cache_events=choices.choice([True, True, False], "events"),
        peer_blocks=choices.choice([0, 0, 3], "peer"),
    )


def operations_of(profile: Profile, config: PoolConfig) -> frozenset[str]:
    ops = profile.operations
    if not config.peer_blocks:
        ops = ops - {"peer_get_new_blocks"}
    return ops


def walk(profile: Profile, level: Level, operation: str, seed: str) -> Trace | None:
    """A walk of the spec ending in ``operation`` (a broken rule of it at robustness)."""
    choices = RandomChoices(seed)
    config = random_config(choices)
    state: PoolState = initial_state(config, profile)
    ctx = draw.Context(evict_first=profile.has_evict_first, peer=config.peer_blocks > 0)
    ops = operations_of(profile, config)
    actions: list[Action] = []
    for _ in range(choices.integer(2, LEAD, "lead")):
        action = next_action(choices, state, ctx, ops, level)
        if action is None:
            continue
        actions.append(action)
        state = _advance(state, action)
    last = _final(choices, state, ctx, operation, level)
    if last is None:
        return None
    actions.append(last)
    meta = TraceMeta("spec", profile.name, "pool", level.name, config)
    return record(Trace(meta, tuple(actions)))


def _advance(state: PoolState, action: Action) -> PoolState:
    if violation(state, action) is not None:
        return state  # refused: nothing changes
    return step(state, action)[0]


def _final(
    choices: RandomChoices, state: PoolState, ctx: draw.Context, operation: str, level: Level
) -> Action | None:
    if level.out_of_contract:
        for drawer in table.named(operation).bad_draws:
            action = drawer(choices, state, ctx)
            if (
                action is not None
                and violation(state, action) is not None
                and not (table.names_peer_blocks(action) and not ctx.peer)
            ):
                return action
        return None
    if operation not in dict(kinds(state, ctx, state.profile.operations, level)):
        return None  # nothing in this state to apply it to
    action = table.named(operation).draw(choices, state, ctx)
    return action if violation(state, action) is None else None


def corpus() -> Iterator[tuple[str, Trace]]:
    """Every vector with its path in the corpus, in a fixed order."""
    for name in sorted(PROFILES):
        profile = PROFILES[name]
        for scenario in SCENARIOS:
            if not all(a.operation in profile.operations for a in scenario.actions):
                continue
            if any(getattr(a, "evict_first", False) for a in scenario.actions) and not (
                profile.has_evict_first
            ):
                continue
            meta = TraceMeta("spec", name, "pool", scenario.level, scenario.config)
            yield (
                f"{name}/invariants/{scenario.name}.itf.json",
                record(Trace(meta, scenario.actions)),
            )
        for level_name in ("safety", "order", "robustness"):
            level = LEVELS[level_name]
            operations = sorted(
                op.name for op in table.POOL_OPERATIONS if op.bad_draws or not level.out_of_contract
            )
            for operation in operations:
                if operation not in profile.operations:
                    continue
                for i in range(WALKS.get(name, OTHER_WALKS)):
                    found = _first_walk(
                        profile, level, operation, f"{name}/{operation}/{level_name}/{i}"
                    )
                    if found is not None:
                        yield f"{name}/{operation}/{level_name}-{i}.itf.json", found


def _first_walk(profile: Profile, level: Level, operation: str, seed: str) -> Trace | None:
    """The first of a few seeds (``seed``, ``seed+1``, ...) whose walk reaches ``operation``."""
    for attempt in range(20):
        found = walk(profile, level, operation, f"{seed}+{attempt}")
        if found is not None:
            return found
    return None


def vector(trace: Trace) -> Trace:
    """A recorded spec trace as a vector: the expected observations only."""
    steps = tuple(replace(s, actual=None) for s in trace.steps)
    return replace(trace, steps=steps)


def write_corpus(out: Path) -> Written:
    """Write every vector under ``out``, removing or replacing only files an earlier
    generation wrote there (:mod:`.owned`); what it did."""
    wanted = {relative: dumps(vector(trace), compact=True) for relative, trace in corpus()}
    return write_owned(out, wanted)
