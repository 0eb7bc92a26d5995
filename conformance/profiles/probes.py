"""Short probes that measure a pool's profile knobs, one probe per knob.

Each probe builds a fresh target, applies a handful of actions chosen so that the knob's
two values lead the pool to visibly different places (a freed block at the front or the
back of the queue, a key that is one hash or two concatenated, a call accepted or
refused), and reads the answer off the target's view, its returned values or its events.
A probe that cannot see what it needs (a hidden free queue, no events, an operation the
pool lacks) says so instead of guessing: :class:`Measurement` ``value is None``.

The pool is driven through its target (:class:`~kvpool.conformance.machines.pool.target.Target`),
so the probes run on anything ``kvpool conform`` can check. The target is built with the
``seed`` profile, refusals read either way (:data:`LISTENING`); no probe reads what the
profile says, only what the pool does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvpool.spec import (
    SEED,
    Action,
    BlockStored,
    CacheFullBlocks,
    CachePartialBlock,
    FreeBlocks,
    GetNewBlocks,
    PoolConfig,
    TakeEvents,
    Touch,
)
from kvpool.spec.actions import ALL_ACTIONS
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.keys import hash_of

from ..machines.pool.refusal import RefusedByReturn
from ..machines.pool.target import EVICT_FIRST, TAKES, Target, TargetFactory

#: Knob value: a bool, or the set of operations the pool offers.
Value = bool | frozenset[str]


@dataclass(frozen=True)
class Measurement:
    """What a probe found for one knob: its value (``None``: undecided) and what showed it."""

    knob: str
    value: Value | None
    #: One line: what the pool did (or why nothing could be seen).
    evidence: str


#: The profile every probe's target is built with: the seed's, and a refusal read either
#: way (raised, or returned as ``refuses_by_return`` says), so that a pool refusing by
#: return value is not measured as taking what it refused.
LISTENING = replace(SEED, refuses_by_return=True)
#: Fine hashes of one request, one per token (``hash_block_size`` 1).
HASHES = request_block_hashes(list(range(8)), 1)
#: The operations of the spec, the set ``operations`` is measured within.
SPEC_OPERATIONS = frozenset(a.operation for a in ALL_ACTIONS)


class Probe:
    """A fresh target for one probe, with its pool's answers kept apart from its refusals."""

    def __init__(self, factory: TargetFactory, config: PoolConfig) -> None:
        self.target: Target = factory(config, LISTENING)

    def offers(self, operation: str) -> bool:
        return operation in self.target.operations

    def takes(self, action: Action) -> bool:
        takes: Callable[[Action], bool] | None = getattr(self.target, TAKES, None)
        return self.offers(action.operation) and (takes is None or bool(takes(action)))

    def accepts(self, *actions: Action) -> bool:
        """Apply ``actions`` in order; whether the pool took the last one without raising
        (every earlier one must be taken: a probe's set-up is in every pool's contract)."""
        *setup, last = actions
        for action in setup:
            self.target.apply(action)
        try:
            self.target.apply(last)
        except Exception:  # a refusal, whatever the pool raises: that is the measurement
            return False
        return True

    def free_queue(self) -> tuple[int, ...] | None:
        return self.target.view().free_queue

    def primary_hash(self, block: int) -> bytes | None:
        primary = self.target.view().primary
        if primary is None or primary[block] is None:
            return None
        key = primary[block]
        assert key is not None
        return hash_of(key)

    def stored(self) -> list[BlockStored]:
        events = self.target.apply(TakeEvents()).result
        assert isinstance(events, tuple)
        return [e for e in events if isinstance(e, BlockStored)]


def operations(factory: TargetFactory) -> Measurement:
    probe = Probe(factory, PoolConfig(4))
    offered = frozenset(probe.target.operations & SPEC_OPERATIONS)
    missing = sorted(SPEC_OPERATIONS - offered)
    return Measurement("operations", offered, f"lacks {', '.join(missing) or 'nothing'}")


def has_evict_first(factory: TargetFactory) -> Measurement:
    probe = Probe(factory, PoolConfig(4))
    has = EVICT_FIRST in probe.target.operations
    return Measurement(
        "has_evict_first", has, f"free_blocks {'takes' if has else 'has no'} evict_first/prepend"
    )


def _free_one(factory: TargetFactory, caching: bool, knob: str) -> Measurement:
    probe = Probe(factory, PoolConfig(5, enable_caching=caching))
    probe.target.apply(GetNewBlocks(2))
    probe.target.apply(FreeBlocks((2,)))
    queue = probe.free_queue()
    if queue is None:
        return Measurement(knob, None, "the free queue's order is not shown")
    where = "front" if queue[0] == 2 else "back" if queue[-1] == 2 else "neither end"
    if where == "neither end":
        return Measurement(knob, None, f"freed block 2 went to neither end: {list(queue)}")
    return Measurement(
        knob,
        where == "front",
        f"caching {'on' if caching else 'off'}: an unkeyed freed block went to the {where} "
        f"({list(queue)})",
    )


def unkeyed_free_to_front(factory: TargetFactory) -> Measurement:
    return _free_one(factory, True, "unkeyed_free_to_front")


def caching_off_free_to_front(factory: TargetFactory) -> Measurement:
    return _free_one(factory, False, "caching_off_free_to_front")


def _coarse_key(factory: TargetFactory) -> tuple[Probe, bytes | None, bool]:
    """Block 1 cached as one block of 2 tokens over hashes of 1 token: its key's hash, and
    whether the call was taken."""
    probe = Probe(factory, PoolConfig(4, enable_kv_cache_events=False))
    taken = probe.accepts(GetNewBlocks(1), CacheFullBlocks(HASHES[:2], (1,), 0, 1, 2))
    return probe, probe.primary_hash(1) if taken else None, taken


def has_hash_block_size(factory: TargetFactory) -> Measurement:
    knob = "has_hash_block_size"
    api = getattr(Probe(factory, PoolConfig(4)).target, "api", None)
    constructor = getattr(api, "constructor_args", None)
    if isinstance(constructor, frozenset):  # a pool with vLLM's API: its signature says
        has = "hash_block_size" in constructor
        return Measurement(
            knob, has, f"the pool's constructor {'takes' if has else 'has no'} hash_block_size"
        )
    _, key, taken = _coarse_key(factory)
    if not taken:
        return Measurement(knob, False, "a block of 2 tokens over 1-token hashes was refused")
    if key is None:
        return Measurement(knob, None, "the block's key is not shown")
    if key == HASHES[0]:
        return Measurement(knob, False, "a 2-token block was keyed by its first 1-token hash")
    return Measurement(knob, True, "a 2-token block was keyed over both of its 1-token hashes")


def coarse_hash_concatenates(factory: TargetFactory) -> Measurement:
    knob = "coarse_hash_concatenates"
    if has_hash_block_size(factory).value is False:
        return Measurement(knob, False, "no hash_block_size: no block spans several hash blocks")
    _, key, taken = _coarse_key(factory)
    if not taken or key is None:
        return Measurement(knob, None, "no block spanning two hash blocks could be cached")
    if key == HASHES[0] + HASHES[1]:
        return Measurement(knob, True, "a 2-token block was keyed by both hashes concatenated")
    if key == HASHES[1]:
        return Measurement(knob, False, "a 2-token block was keyed by its last hash")
    return Measurement(knob, None, "a 2-token block got a key that is neither form")


def has_block_mask(factory: TargetFactory) -> Measurement:
    probe = Probe(factory, PoolConfig(4))
    has = probe.takes(CacheFullBlocks(HASHES[:1], (1,), 0, 1, 1, block_mask=(True,)))
    return Measurement(
        "has_block_mask", has, f"cache_full_blocks {'takes' if has else 'has no'} block_mask"
    )


def has_replace_existing_hashes(factory: TargetFactory) -> Measurement:
    probe = Probe(factory, PoolConfig(4))
    has = probe.takes(CachePartialBlock(HASHES[:1], 1, 1, 0, 2, True))
    return Measurement(
        "has_replace_existing_hashes",
        has,
        f"cache_partial_block {'takes' if has else 'is missing or has no'} replace_existing_hashes",
    )


def cache_promotes_partial(factory: TargetFactory) -> Measurement:
    knob = "cache_promotes_partial"
    probe = Probe(factory, PoolConfig(4, enable_kv_cache_events=False))
    if probe.offers("cache_partial_block"):
        if not probe.accepts(GetNewBlocks(1), CachePartialBlock(HASHES[:2], 1, 1, 0, 2)):
            return Measurement(knob, None, "a partial entry inside a block was refused")
        taken = probe.accepts(CacheFullBlocks(HASHES[:2], (1,), 0, 1, 2))
        how = "a partial entry's block cached as full"
    else:
        taken = probe.accepts(
            GetNewBlocks(2),
            CacheFullBlocks(HASHES[:1], (1,), 0, 1, 1),
            CacheFullBlocks(HASHES[:2], (2, 1), 1, 2, 1),
        )
        how = "a block keyed over 1 token cached again over 2"
    return Measurement(knob, taken, f"{how}: {'taken' if taken else 'refused'}")


def parent_hash_from_block(factory: TargetFactory) -> Measurement:
    knob = "parent_hash_from_block"
    probe = Probe(factory, PoolConfig(4))
    if not probe.offers("take_events"):
        return Measurement(knob, None, "the pool publishes no events")
    taken = probe.accepts(GetNewBlocks(2), CacheFullBlocks(HASHES[:2], (1, 2), 1, 2, 1))
    if not taken:
        return Measurement(knob, True, "caching after an unkeyed parent block was refused")
    stored = probe.stored()
    if len(stored) != 1 or stored[0].parent_block_hash != HASHES[0]:
        return Measurement(knob, None, f"an unexpected BlockStored after it: {stored}")
    return Measurement(knob, False, "the parent hash was taken from the request")


def partial_at_boundary(factory: TargetFactory) -> Measurement:
    knob = "partial_at_boundary"
    probe = Probe(factory, PoolConfig(4, enable_kv_cache_events=False))
    if not probe.offers("cache_partial_block"):
        return Measurement(knob, False, "no cache_partial_block")
    taken = probe.accepts(GetNewBlocks(1), CachePartialBlock(HASHES[:2], 1, 2, 0, 2))
    keyed = taken and probe.primary_hash(1) is not None
    return Measurement(
        knob,
        keyed,
        f"an entry at a block boundary was {'registered' if keyed else 'not registered'}",
    )


def partial_parent_fine_hash(factory: TargetFactory) -> Measurement:
    knob = "partial_parent_fine_hash"
    probe = Probe(factory, PoolConfig(4))
    if not probe.offers("cache_partial_block"):
        return Measurement(knob, False, "no cache_partial_block")
    if not probe.offers("take_events"):
        return Measurement(knob, None, "the pool publishes no events")
    if not probe.accepts(GetNewBlocks(1), CachePartialBlock(HASHES[:3], 1, 3, 0, 4)):
        return Measurement(knob, None, "a partial entry of 3 tokens in a 4-token block was refused")
    stored = probe.stored()
    if len(stored) != 1:
        return Measurement(knob, None, f"{len(stored)} BlockStored events for one entry")
    parent = stored[0].parent_block_hash
    if parent == HASHES[1]:
        return Measurement(knob, True, "its BlockStored names the fine hash before num_tokens")
    if parent is None:
        return Measurement(knob, False, "its BlockStored describes the block from its start")
    return Measurement(knob, None, "its BlockStored names an unknown parent")


def null_ref_cnt_moves(factory: TargetFactory) -> Measurement:
    knob = "null_ref_cnt_moves"
    probe = Probe(factory, PoolConfig(4))
    probe.target.apply(Touch((0,)))
    counts = probe.target.view().ref_cnt
    if counts is None:
        return Measurement(knob, None, "ref counts are not shown")
    moved = counts[0] != 0
    return Measurement(knob, moved, f"touching the null block left its ref_cnt {counts[0]}")


def strong_pool_reference(factory: TargetFactory) -> Measurement:
    knob = "strong_pool_reference"
    probe = Probe(factory, PoolConfig(4))
    if not probe.offers("peer_get_new_blocks"):
        return Measurement(knob, False, "blocks name no pool of their own")
    taken = probe.accepts(FreeBlocks((), False, (1,)))
    return Measurement(
        knob,
        taken,
        "a block whose pool was dropped was "
        + ("handed back to it (the block kept it alive)" if taken else "refused"),
    )


def keys_die_on_free(factory: TargetFactory) -> Measurement:
    knob = "keys_die_on_free"
    probe = Probe(factory, PoolConfig(4, enable_kv_cache_events=False))
    if not probe.offers("cache_full_blocks"):
        return Measurement(knob, False, "no cache_full_blocks: no block has a key")
    probe.target.apply(GetNewBlocks(1))
    probe.target.apply(CacheFullBlocks(HASHES[:1], (1,), 0, 1, 1))
    probe.target.apply(FreeBlocks((1,)))
    if probe.target.view().primary is None:
        return Measurement(knob, None, "the blocks' keys are not shown")
    died = probe.primary_hash(1) is None
    return Measurement(
        knob, died, f"a cached block freed by its last holder {'lost' if died else 'kept'} its key"
    )


def refuses_by_return(factory: TargetFactory) -> Measurement:
    knob = "refuses_by_return"
    tries = (
        ("a double free", (GetNewBlocks(1), FreeBlocks((1,)), FreeBlocks((1,)))),
        ("get_new_blocks(4) with 3 free", (GetNewBlocks(4),)),
    )
    for what, actions in tries:
        probe = Probe(factory, PoolConfig(4))
        *setup, last = actions
        for action in setup:
            probe.target.apply(action)
        try:
            probe.target.apply(last)
        except RefusedByReturn as exc:
            return Measurement(knob, True, f"{what} returned {exc.returned!r}, changing nothing")
        except Exception as exc:  # a refusal by exception: what the seed states
            return Measurement(knob, False, f"{what} raised {type(exc).__name__}")
    return Measurement(knob, False, "a double free and an over-allocation were both taken")


def flushes_under_pressure(factory: TargetFactory) -> Measurement:
    knob = "flushes_under_pressure"
    probe = Probe(factory, PoolConfig(4, enable_kv_cache_events=False))
    if not probe.offers("cache_full_blocks"):
        return Measurement(knob, False, "no cache_full_blocks: no block has a key")
    probe.target.apply(GetNewBlocks(2))
    probe.target.apply(CacheFullBlocks(HASHES[:2], (1, 2), 0, 2, 1))
    probe.target.apply(FreeBlocks((2, 1)))
    if probe.target.view().primary is None:
        return Measurement(knob, None, "the blocks' keys are not shown")
    if probe.primary_hash(1) is None or probe.primary_hash(2) is None:
        return Measurement(knob, None, "no freed block kept its key: nothing cached to flush")
    got = probe.target.apply(GetNewBlocks(2)).result  # block 3 and one cached block
    left = [b for b in (1, 2) if not isinstance(got, tuple) or b not in got]
    if len(left) != 1:
        return Measurement(knob, None, f"the allocation handed out {got!r}")
    flushed = probe.primary_hash(left[0]) is None
    return Measurement(
        knob,
        flushed,
        f"an allocation that evicted a cached block {'dropped' if flushed else 'kept'} the key "
        f"of the other cached free block {left[0]}",
    )


def coarse_events_name_fine_hash(factory: TargetFactory) -> Measurement:
    knob = "coarse_events_name_fine_hash"
    probe = Probe(factory, PoolConfig(4))
    if not probe.offers("take_events"):
        return Measurement(knob, False, "the pool publishes no events")
    if not probe.accepts(GetNewBlocks(1), CacheFullBlocks(HASHES[:2], (1,), 0, 1, 2)):
        return Measurement(knob, False, "no block spanning two hash blocks could be cached")
    if probe.primary_hash(1) != HASHES[0] + HASHES[1]:
        return Measurement(knob, False, "a coarse block's key is no concatenation")
    probe.stored()
    ints = getattr(probe.target, "publishes_int_hashes", None)
    if ints is None:
        return Measurement(knob, None, "the events' hash type is not shown")
    if not ints:
        return Measurement(knob, False, "a concatenated key's event names it by its bytes")
    return Measurement(
        knob, True, "by default its events name a concatenated key by its last fine hash's int"
    )


#: Every probe, in the order of the profile's fields.
PROBES: tuple[Callable[[TargetFactory], Measurement], ...] = (
    unkeyed_free_to_front,
    caching_off_free_to_front,
    has_evict_first,
    operations,
    has_hash_block_size,
    coarse_hash_concatenates,
    has_block_mask,
    cache_promotes_partial,
    parent_hash_from_block,
    partial_at_boundary,
    has_replace_existing_hashes,
    null_ref_cnt_moves,
    partial_parent_fine_hash,
    strong_pool_reference,
    keys_die_on_free,
    refuses_by_return,
    flushes_under_pressure,
    coarse_events_name_fine_hash,
)


def measure(factory: TargetFactory) -> list[Measurement]:
    """Every knob a probe can measure on the pools ``factory`` builds."""
    found = []
    for probe in PROBES:
        try:
            found.append(probe(factory))
        except Exception as exc:  # a set-up step the pool refused: the knob stays undecided
            name = probe.__name__
            found.append(Measurement(name, None, f"probe failed: {type(exc).__name__}: {exc}"))
    return found
