"""The six lifecycle states of a block, and the transitions between them, found by running
the spec.

A block's lifecycle state is a function of what the pool remembers about it (its ref_cnt,
its keys, its reuse watcher). The transitions are not written down anywhere: we explore
every state a small spec pool reaches under a fixed alphabet of operations, classify every
block before and after each step, and keep each change of state with the operation that
made it. So the diagram the docs draw is what the spec does, and changes when it does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass

from kvpool.spec import (
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    ContractViolation,
    EvictBlocks,
    FreeBlocks,
    GetNewBlocks,
    MoveBlockHashes,
    PoolConfig,
    PoolState,
    ResetPrefixCache,
    Touch,
    UnpinBlocks,
    initial_state,
    step,
)

from ...machines.pool.lifecycle_states import STATES as STATES
from ...machines.pool.lifecycle_states import LifecycleState as LifecycleState
from ...machines.pool.lifecycle_states import classify as classify


@dataclass(frozen=True, order=True)
class Transition:
    """A block went from ``source`` to ``target`` (state ids) in one ``operation``."""

    source: str
    target: str
    operation: str


#: The pool the exploration runs on: three real blocks reach every state and transition.
EXPLORED_BLOCKS = 4
#: How many steps from a new pool the exploration goes.
EXPLORED_DEPTH = 6


def alphabet(num_blocks: int) -> list[Action]:
    """The operations tried in every state: each one on each real block (and pairs for
    ``move_block_hashes``), with one hash per block so that any block can be cached."""
    real = range(1, num_blocks)
    actions: list[Action] = [GetNewBlocks(1), ResetPrefixCache()]
    for b in real:
        chain = (bytes([b]),)
        actions += [
            FreeBlocks((b,)),
            FreeBlocks((b,), evict_first=True),
            Touch((b,)),
            UnpinBlocks((b,), "reader"),
            CacheFullBlocks(chain, (b,), 0, 1, 1),
            CachePartialBlock(chain, b, 1, 0, 2),
            EvictBlocks((b,)),
        ]
        actions += [MoveBlockHashes(b, d) for d in real if d != b]
    return actions


def _fingerprint(state: PoolState) -> Hashable:
    return (
        state.ref_cnt,
        state.free_queue,
        state.primary,
        tuple(tuple(sorted(e)) for e in state.extra),
        tuple(sorted(state.cache.items())),
        tuple(sorted(state.watchers.items())),
    )


def explore(
    num_blocks: int = EXPLORED_BLOCKS, depth: int = EXPLORED_DEPTH
) -> tuple[frozenset[str], tuple[Transition, ...]]:
    """Every lifecycle state and state change a pool of ``num_blocks`` reaches in up to
    ``depth`` steps from new. Refused actions change nothing and are skipped."""
    start = initial_state(PoolConfig(num_blocks, enable_kv_cache_events=False))
    actions = alphabet(num_blocks)
    real = range(1, num_blocks)
    seen = {_fingerprint(start)}
    reached = {classify(start, b).id for b in real}
    found: set[Transition] = set()
    frontier: deque[tuple[PoolState, int]] = deque([(start, 0)])
    while frontier:
        state, steps = frontier.popleft()
        if steps == depth:
            continue
        before = [classify(state, b).id for b in real]
        for action in actions:
            try:
                after_state, _ = step(state, action)
            except ContractViolation:
                continue
            for b, was in zip(real, before, strict=True):
                now = classify(after_state, b).id
                reached.add(now)
                if now != was:
                    found.add(Transition(was, now, action.operation))
            key = _fingerprint(after_state)
            if key not in seen:
                seen.add(key)
                frontier.append((after_state, steps + 1))
    return frozenset(reached), tuple(sorted(found))


def grouped(transitions: tuple[Transition, ...]) -> dict[tuple[str, str], tuple[str, ...]]:
    """``(source, target) -> operations`` in a stable order (the docs' state order, then the
    operation names)."""
    order = {s.id: i for i, s in enumerate(STATES)}
    pairs: dict[tuple[str, str], list[str]] = {}
    for t in sorted(transitions, key=lambda t: (order[t.source], order[t.target], t.operation)):
        pairs.setdefault((t.source, t.target), []).append(t.operation)
    return {pair: tuple(ops) for pair, ops in pairs.items()}
