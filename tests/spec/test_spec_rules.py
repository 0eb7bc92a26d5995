"""Every rule of RULES is raised by an out-of-contract action; violation() agrees with step()."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from kvpool.spec import (
    RULES,
    SEED,
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    ContractViolation,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
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
    get_profile,
    initial_state,
    run,
    step,
    violation,
)
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.rules import REQUEST_RULES

H1 = request_block_hashes(list(range(400, 408)), 1)
H2 = request_block_hashes(list(range(400, 408)), 2)


def fresh(n: int = 6, **config: object) -> PoolState:
    return initial_state(PoolConfig(num_gpu_blocks=n, **config))  # type: ignore[arg-type]


def held(n: int = 6, k: int = 3, **config: object) -> PoolState:
    """Blocks 1..k held once, nothing cached."""
    return run(fresh(n, **config), GetNewBlocks(k))


def keyed() -> PoolState:
    """Blocks 1..3 held and cached as full blocks of one token."""
    return run(held(), CacheFullBlocks(H1, (1, 2, 3), 0, 3, 1))


NO_EVICT_FIRST = replace(SEED, name="no-evict-first", has_evict_first=False)
NO_TOUCH = replace(SEED, name="no-touch", operations=SEED.operations - {"touch"})


@dataclass(frozen=True)
class Case:
    id: str
    state: PoolState
    action: Action
    rule: str
    block: int | None


CASES: list[Case] = [
    Case("free-out-of-range", held(), FreeBlocks((1, 6)), "block-id-range", 6),
    Case("touch-negative-id", keyed(), Touch((-1,)), "block-id-range", -1),
    Case("evict-out-of-range", fresh(), EvictBlocks((9,)), "block-id-range", 9),
    Case("writable-out-of-range", fresh(), IsBlockWritable(6), "block-id-range", 6),
    Case("move-src-out-of-range", held(), MoveBlockHashes(7, 1), "block-id-range", 7),
    Case("get-negative", fresh(), GetNewBlocks(-1), "get-new-blocks-count", None),
    Case("get-too-many", held(), GetNewBlocks(3), "get-new-blocks-count", None),
    Case(
        "peer-get-too-many", fresh(peer_blocks=3), PeerGetNewBlocks(3), "get-new-blocks-count", None
    ),
    Case(
        "full-negative-group",
        held(),
        CacheFullBlocks(H1, (1,), 0, 1, 1, group_id=-1),
        "group-id-range",
        None,
    ),
    Case(
        "partial-huge-group", held(), CachePartialBlock(H1, 1, 1, 2**32, 1), "group-id-range", None
    ),
    Case("lookup-huge-group", keyed(), GetCachedBlock(H1[0], (0, 2**32)), "group-id-range", None),
    Case("free-a-free-block", held(), FreeBlocks((4,)), "free-held", 4),
    Case("double-free-in-one-call", held(), FreeBlocks((2, 1, 2)), "free-held", 2),
    Case(
        "foreign-over-release", fresh(peer_blocks=3), FreeBlocks((), foreign=(1,)), "free-held", 1
    ),
    Case(
        "foreign-out-of-range",
        fresh(peer_blocks=3),
        FreeBlocks((), foreign=(3,)),
        "block-id-range",
        3,
    ),
    Case("foreign-without-peer", held(), FreeBlocks((1,), foreign=(2,)), "foreign-route", 2),
    Case("peer-get-without-peer", fresh(), PeerGetNewBlocks(1), "foreign-route", None),
    Case(
        "evict-first-on-old-profile",
        run(initial_state(PoolConfig(4), NO_EVICT_FIRST), GetNewBlocks(1)),
        FreeBlocks((1,), evict_first=True),
        "evict-first-unsupported",
        None,
    ),
    Case("touch-free-unkeyed", held(), Touch((0, 5)), "touch-identity", 5),
    Case("unpin-null", held(), UnpinBlocks((1, 0), "w"), "null-unpin", 0),
    Case("unpin-free", held(), UnpinBlocks((4,), "w"), "unpin-held", 4),
    Case("unpin-twice-held-once", held(), UnpinBlocks((1, 1), "w"), "unpin-held", 1),
    Case(
        "cache-full-caching-off",
        held(enable_caching=False),
        CacheFullBlocks(H1, (1,), 0, 1, 1),
        "caching-enabled",
        None,
    ),
    Case(
        "cache-partial-caching-off",
        held(enable_caching=False),
        CachePartialBlock(H1, 1, 1, 0, 1),
        "caching-enabled",
        None,
    ),
    Case(
        "block-size-not-multiple",
        held(hash_block_size=2),
        CacheFullBlocks(H2, (1,), 0, 1, 3),
        "block-size-multiple",
        None,
    ),
    Case("block-size-zero", held(), CachePartialBlock(H1, 1, 1, 0, 0), "block-size-multiple", None),
    Case("cached-beyond-full", held(), CacheFullBlocks(H1, (1, 2), 2, 1, 1), "cache-range", None),
    Case("full-beyond-blocks", held(), CacheFullBlocks(H1, (1, 2), 0, 3, 1), "cache-range", None),
    Case(
        "mask-wrong-length",
        held(),
        CacheFullBlocks(H1, (1, 2), 0, 2, 1, block_mask=(True,)),
        "cache-range",
        None,
    ),
    Case(
        "too-few-full-hashes",
        held(),
        CacheFullBlocks(H1[:2], (1, 2, 3), 0, 3, 1),
        "hashes-available",
        None,
    ),
    Case(
        "too-few-coarse-hashes",
        held(hash_block_size=2),
        CacheFullBlocks(H2, (1, 2), 0, 2, 6),
        "hashes-available",
        None,
    ),
    Case(
        "too-few-partial-hashes",
        held(),
        CachePartialBlock(H1[:2], 1, 3, 0, 4),
        "hashes-available",
        1,
    ),
    Case("cache-full-free-block", held(), CacheFullBlocks(H1, (1, 4), 0, 2, 1), "cache-held", 4),
    Case("cache-partial-free-block", held(), CachePartialBlock(H1, 5, 1, 0, 4), "cache-held", 5),
    Case(
        "cache-same-block-twice", held(), CacheFullBlocks(H1, (1, 1), 0, 2, 1), "cache-distinct", 1
    ),
    Case("recache-full-block", keyed(), CacheFullBlocks(H1, (1, 2), 1, 2, 1), "cache-fresh", 2),
    Case("partial-zero-tokens", held(), CachePartialBlock(H1, 1, 0, 0, 4), "partial-tokens", 1),
    Case(
        "partial-not-multiple",
        held(hash_block_size=2),
        CachePartialBlock(H2, 1, 3, 0, 4),
        "partial-tokens",
        1,
    ),
    Case(
        "parent-block-without-key",
        run(initial_state(PoolConfig(4), get_profile("vllm-0.10")), GetNewBlocks(2)),
        CacheFullBlocks(H1, (1, 2), 1, 2, 1),
        "cache-parent-keyed",
        1,
    ),
    Case("move-to-null", keyed(), MoveBlockHashes(1, 0), "move-null", 0),
    Case("move-to-keyed", keyed(), MoveBlockHashes(1, 2), "move-dst-unkeyed", 2),
    Case(
        "unsupported-touch",
        initial_state(PoolConfig(4), NO_TOUCH),
        Touch(()),
        "unsupported-action",
        None,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_out_of_contract_action_raises_the_named_rule(case: Case) -> None:
    with pytest.raises(ContractViolation) as info:
        step(case.state, case.action)
    err = info.value
    assert err.rule == case.rule
    assert err.operation == case.action.operation
    assert err.block == case.block
    message = str(err)
    assert f"'{case.rule}'" in message
    assert message.startswith(case.action.operation)
    if case.block is not None:
        assert f"block {case.block}" in message


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_violation_agrees_with_step_raising(case: Case) -> None:
    found = violation(case.state, case.action)
    assert found is not None
    assert (found.rule, found.operation, found.block) == (
        case.rule,
        case.action.operation,
        case.block,
    )


def test_every_rule_is_produced_by_some_case() -> None:
    produced = {c.rule for c in CASES}
    assert produced <= set(RULES), produced - set(RULES)
    missing = set(RULES) - REQUEST_RULES - produced
    assert not missing, f"rules never raised by a case: {sorted(missing)}"


def test_peer_get_new_blocks_refuses_more_than_the_peer_has() -> None:
    state = fresh(peer_blocks=3)
    found = violation(state, PeerGetNewBlocks(3))
    assert found is not None and found.rule == "get-new-blocks-count"
    assert violation(state, PeerGetNewBlocks(2)) is None


VALID: list[tuple[str, PoolState, Action]] = [
    ("get-all", held(), GetNewBlocks(2)),
    ("free-null-only", fresh(), FreeBlocks((0, 0))),
    ("free-twice-held-twice", run(keyed(), Touch((1,))), FreeBlocks((1, 1))),
    ("foreign-free", run(fresh(peer_blocks=3), PeerGetNewBlocks(1)), FreeBlocks((), foreign=(1,))),
    ("touch-cached-free", run(keyed(), FreeBlocks((2,))), Touch((2, 2))),
    ("touch-null", fresh(), Touch((0,))),
    ("touch-held-unkeyed", held(), Touch((1,))),
    ("unpin-held", held(), UnpinBlocks((1,), "w")),
    (
        "cache-masked-out-free-block",
        held(),
        CacheFullBlocks(H1, (1, 4), 0, 2, 1, block_mask=(True, False)),
    ),
    ("cache-with-null", held(), CacheFullBlocks(H1, (0, 1, 0), 0, 3, 1)),
    ("cache-nothing-new-few-hashes", held(), CacheFullBlocks((), (1,), 1, 1, 1)),
    ("partial-null-caching-off", held(enable_caching=False), CachePartialBlock(H1, 0, 1, 0, 1)),
    (
        "partial-promote-by-full",
        run(held(), CachePartialBlock(H1, 1, 1, 0, 2)),
        CacheFullBlocks(H1, (1,), 0, 1, 2),
    ),
    ("lookup", keyed(), GetCachedBlock(H1[0], (0, 1))),
    ("evict-null-and-free", fresh(), EvictBlocks((0, 1))),
    ("move-to-free-unkeyed", keyed(), MoveBlockHashes(1, 4)),
    ("reset-while-held", held(), ResetPrefixCache()),
    ("writable-null", fresh(), IsBlockWritable(0)),
    ("usage", fresh(1), GetUsage()),
    ("take-events", keyed(), TakeEvents()),
]


@pytest.mark.parametrize(("name", "state", "action"), VALID, ids=[v[0] for v in VALID])
def test_in_contract_action_has_no_violation_and_steps(
    name: str, state: PoolState, action: Action
) -> None:
    assert violation(state, action) is None
    step(state, action)  # must not raise
