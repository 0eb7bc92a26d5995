"""The facts the reference pages read off the spec's code (which rules an operation can
refuse with, which events it publishes, which pool calls a request action makes) agree with
what the spec does when run.

A seeded random walk drives the spec with in- and out-of-contract actions on every profile;
every refusal's rule and every published event must be among the facts derived for that
operation. A derivation that misses one (a rule checked through a path the walk of the code
does not follow) fails here.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from kvpool.conformance.tools.reference.action_facts import (
    all_pool_action_facts,
    all_request_action_facts,
)
from kvpool.spec import (
    PROFILES,
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
    PeerGetNewBlocks,
    PoolConfig,
    PoolState,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
    initial_state,
    step,
)
from kvpool.spec.manager import (
    Admit,
    Append,
    Compute,
    EvictCached,
    Finish,
    KVGroup,
    ManagerConfig,
    Preempt,
    ResetCache,
    Resume,
    SpecPool,
    apply_request,
    initial_manager_state,
    request_violation,
)

Observed = dict[str, set[str]]


def random_action(rng: random.Random, state: PoolState) -> Action:
    """One action, usually in range, sometimes not (to reach the refusals)."""
    n = state.num_blocks

    def block() -> int:
        return rng.randrange(1, n) if n > 1 and rng.random() < 0.8 else rng.randrange(-1, n + 2)

    def blocks() -> tuple[int, ...]:
        return tuple(block() for _ in range(rng.randrange(0, 4)))

    hashes = tuple(bytes([i + 1]) * 2 for i in range(rng.randrange(0, 7)))
    group = rng.choice([0, 0, 1, 2**32])
    size = rng.choice([1, 2, 2, 3, 4])
    listed = blocks()
    cached = rng.randrange(0, len(listed) + 2)
    full = rng.randrange(cached, len(listed) + 2)
    mask = rng.choice([None, tuple(rng.random() < 0.7 for _ in range(max(0, full - cached)))])
    makers: list[Callable[[], Action]] = [
        lambda: GetNewBlocks(rng.randrange(-1, n + 1)),
        lambda: FreeBlocks(blocks(), rng.random() < 0.3, rng.choice([(), (rng.randrange(0, 4),)])),
        lambda: Touch(blocks()),
        lambda: UnpinBlocks(blocks(), "reader"),
        lambda: CacheFullBlocks(hashes, listed, cached, full, size, group, mask),
        lambda: CachePartialBlock(
            hashes, block(), rng.randrange(-1, 9), group, size, rng.random() < 0.3
        ),
        lambda: GetCachedBlock(rng.choice(hashes or (b"\1\1",)), (group,)),
        lambda: EvictBlocks(blocks()),
        lambda: MoveBlockHashes(block(), block()),
        ResetPrefixCache,
        lambda: IsBlockWritable(block()),
        GetUsage,
        GetNumFreeBlocks,
        TakeEvents,
        lambda: PeerGetNewBlocks(rng.randrange(-1, 4)),
    ]
    return rng.choice(makers)()


def walk_pool(seed: int, steps: int) -> tuple[Observed, Observed]:
    """Run random actions on random pools: the rules each operation was refused with and
    the event types each one published."""
    rng = random.Random(seed)
    refusals: Observed = {}
    events: Observed = {}
    for _ in range(steps // 40):
        config = PoolConfig(
            rng.randrange(1, 7),
            enable_caching=rng.random() < 0.85,
            hash_block_size=rng.choice([1, 1, 2]),
            peer_blocks=rng.choice([0, 0, 3]),
        )
        state = initial_state(config, rng.choice(list(PROFILES.values())))
        for _ in range(40):
            action = random_action(rng, state)
            try:
                after, _ = step(state, action)
            except ContractViolation as refused:
                refusals.setdefault(action.operation, set()).add(refused.rule)
                continue
            if not isinstance(action, TakeEvents):
                new = after.events[len(state.events) :]
                events.setdefault(action.operation, set()).update(type(e).__name__ for e in new)
            state = after
    return refusals, events


def unexplained(observed: Observed, derived: dict[str, set[str]]) -> list[str]:
    """What was observed but is not among the derived facts, one line each."""
    return [
        f"{operation}: {item}"
        for operation, items in sorted(observed.items())
        for item in sorted(items - derived.get(operation, set()))
    ]


def derived_rules() -> dict[str, set[str]]:
    return {f.operation: set(f.rules) for f in all_pool_action_facts()}


def derived_events() -> dict[str, set[str]]:
    return {f.operation: {e.__name__ for e in f.events} for f in all_pool_action_facts()}


def test_every_observed_refusal_and_event_is_derived() -> None:
    refusals, events = walk_pool(seed=8, steps=6000)
    assert not unexplained(refusals, derived_rules())
    assert not unexplained(events, derived_events())
    # the walk is not vacuous: it reaches most of what the code says can happen
    seen = sum(len(r) for r in refusals.values())
    possible = sum(len(r) for r in derived_rules().values())
    assert seen >= 0.8 * possible, f"the walk saw only {seen} of {possible} (operation, rule)"
    assert {"BlockStored", "BlockRemoved", "AllBlocksCleared"} <= set().union(*events.values())


def test_a_derivation_that_misses_a_rule_is_caught() -> None:
    refusals, _ = walk_pool(seed=8, steps=2000)
    rules = derived_rules()
    rules["free_blocks"] = rules["free_blocks"] - {"free-held"}
    assert "free_blocks: free-held" in unexplained(refusals, rules)


def test_request_actions_call_the_pool_operations_derived_for_them() -> None:
    derived = {f.operation: {c.operation for c in f.pool_calls} for f in all_request_action_facts()}
    rules = {f.operation: set(f.rules) for f in all_request_action_facts()}
    rng = random.Random(3)
    calls: Observed = {}
    refusals: Observed = {}
    for _ in range(30):
        groups = rng.choice([(KVGroup(),), (KVGroup(), KVGroup(sliding_window_blocks=2))])
        config = ManagerConfig(2, groups)
        pool_state = initial_state(PoolConfig(12, hash_block_size=rng.choice([1, 2])))
        state = initial_manager_state(config, pool_state.config)
        ids = ["a", "b", "c"]
        for _ in range(25):
            rid = rng.choice(ids)
            tokens = tuple(rng.randrange(0, 4) for _ in range(rng.randrange(0, 7)))
            action = rng.choice(
                [
                    Admit(rid, tokens),
                    Append(rid, tokens),
                    Compute(rid, rng.random() < 0.5),
                    Preempt(rid),
                    Resume(rid),
                    Finish(rid),
                    ResetCache(),
                    EvictCached(block_ids=(rng.randrange(0, 12),)),
                ]
            )
            refused = request_violation(state, action)
            if refused is not None:
                refusals.setdefault(action.operation, set()).add(refused.rule)
                continue
            pool = SpecPool(pool_state)
            state, _ = apply_request(pool, state, action)
            pool_state = pool.state
            calls.setdefault(action.operation, set()).update(c.operation for c in pool.calls)
    assert not unexplained(refusals, rules)
    assert not unexplained(calls, derived)
    assert len(calls) == len(derived), f"the walk ran only {sorted(calls)}"
