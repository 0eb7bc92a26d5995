"""Drawing the pool machine's test cases for a :class:`~.lockstep.LockstepRun`.

Each step draws the next kind of action (weighted towards the ones that build state) from
the spec's current state, then the action itself; the run applies it to the spec and the
target and compares. :func:`pool_case` is a test case of the seeded search
(:mod:`.seeded_search`), which ``kvpool conform`` runs and ``kvpool fuzz`` seeds from
Hypothesis; ``kvpool diff``'s Hypothesis machine draws with :func:`next_action` too.
Drawing only finds failures: :mod:`.shrink` minimises them by replaying actions, which is
much faster than shrinking Hypothesis's choice sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import reject
from kvpool.spec import (
    Action,
    FreeBlocks,
    GetNumFreeBlocks,
    GetUsage,
    PoolState,
    Profile,
    ResetPrefixCache,
    TakeEvents,
    violation,
)

from ..events.caller import manager_could_call
from . import draw
from .choices import Choices
from .levels import Level
from .lockstep import ExpectedEnd, LockstepRun, Nonconformance, RunRecord
from .seeded_search import Start, Step
from .signature import signature
from .surface import fault_of
from .target import TargetFactory

#: How often each operation is drawn, relative to the others: the ones that build state
#: (allocate, cache, free, hit) more than the queries.
WEIGHTS: dict[str, int] = {
    "get_new_blocks": 6,
    "free_blocks": 4,
    "touch": 4,
    "unpin_blocks": 2,
    "cache_full_blocks": 5,
    "cache_partial_block": 2,
    "get_cached_block": 3,
    "evict_blocks": 2,
    "move_block_hashes": 1,
    "is_block_writable": 3,  # one block per call, and a cell for each of eleven states
    "peer_get_new_blocks": 1,
    "reset_prefix_cache": 1,
    "get_usage": 1,
    "get_num_free_blocks": 1,
    "take_events": 2,
}


#: What a block in a rare state boosts: the queries and the calls that name a block.
RARE_BOOST = frozenset(
    {"is_block_writable", "evict_blocks", "move_block_hashes", "cache_partial_block"}
    | {"get_usage", "get_num_free_blocks", "take_events", "get_cached_block"}
)


def _query(action: Action) -> draw.Drawer:
    return lambda choices, state, ctx: action


DRAWERS: dict[str, draw.Drawer] = {
    "get_new_blocks": draw.draw_get_new_blocks,
    "free_blocks": draw.draw_free_blocks,
    "touch": draw.draw_touch,
    "unpin_blocks": draw.draw_unpin_blocks,
    "cache_full_blocks": draw.draw_cache_full_blocks,
    "cache_partial_block": draw.draw_cache_partial_block,
    "get_cached_block": draw.draw_get_cached_block,
    "evict_blocks": draw.draw_evict_blocks,
    "move_block_hashes": draw.draw_move_block_hashes,
    "is_block_writable": draw.draw_is_block_writable,
    "peer_get_new_blocks": draw.draw_peer_get_new_blocks,
    "reset_prefix_cache": _query(ResetPrefixCache()),
    "get_usage": _query(GetUsage()),
    "get_num_free_blocks": _query(GetNumFreeBlocks()),
    "take_events": _query(TakeEvents()),
}


def kinds(
    state: PoolState, ctx: draw.Context, operations: frozenset[str], level: Level
) -> tuple[tuple[str, int], ...]:
    """The operations that can be drawn now, with their weights."""
    real = state.primary[1:]
    held = any(state.ref_cnt[1:])  # counts are never negative (invariant 1)
    cannot: set[str] = set()  # the operations that cannot be drawn now
    if not held:
        cannot |= _UNHELD
        if real.count(None) == len(real):
            cannot.add("touch")  # no block held, none keyed: nothing to hit
    if not state.config.enable_caching:
        cannot |= _UNCACHED
    if None not in real:
        cannot.add("move_block_hashes")  # no block without a key to move keys to
    if not (ctx.peer and state.peer is not None):
        cannot.add("peer_get_new_blocks")
    boost: set[str] = set()
    if any(state.extra):
        boost.add("move_block_hashes")  # a block with extra keys: where moves go wrong
    if len(state.free_queue) == state.num_blocks - 1:
        boost.add("reset_prefix_cache")  # idle: the only time a reset does anything
    if ctx.just_dropped:
        boost.add("get_cached_block")  # a key just lost a block: is it still served?
    cache = state.cache
    if any(len(blocks) > 1 for blocks in cache.values()):
        boost.add("evict_blocks")  # duplicates: evict them one at a time
    if ctx.for_events and len(cache) >= 2:
        boost.add("evict_blocks")  # a parent evicted before its child: routers' trees
    if max(state.ref_cnt) >= 2:
        boost.add("unpin_blocks")  # a shared block unpinned: held on, its watcher waiting
    if draw.has_rare_blocks(state):
        # a block in a state few steps reach: the queries and the calls that name a block,
        # so that each of them meets it
        boost |= RARE_BOOST
        if held:
            boost.add("reset_prefix_cache")  # refused while a block is held: nothing lost
    # what follows depends on these alone: worked out once for each
    signs = (operations, frozenset(cannot), frozenset(boost), level.out_of_contract)
    chosen = _WEIGHED.get(signs)
    if chosen is None:
        chosen = _WEIGHED[signs] = _weighed(*signs)
    return chosen


#: The operations no state without a held block can draw, and none without caching.
_UNHELD = frozenset({"free_blocks", "unpin_blocks", "cache_full_blocks", "cache_partial_block"})
_UNCACHED = frozenset({"cache_full_blocks", "cache_partial_block"})


def _weighed(
    operations: frozenset[str], cannot: frozenset[str], boost: frozenset[str], broken: bool
) -> tuple[tuple[str, int], ...]:
    """The drawable operations (in :data:`DRAWERS`' order) with their weights, boosted
    four times where ``boost`` says; with ``broken``, a rule broken too."""
    chosen = [
        (op, WEIGHTS[op] * 4 if op in boost else WEIGHTS[op])
        for op in DRAWERS
        if op in operations and op not in cannot
    ]
    if broken:
        chosen.append(("out_of_contract", 4))
    return tuple(chosen)


#: :func:`_weighed` by its arguments, as each is first met (a run meets a few dozen).
_WEIGHED: dict[
    tuple[frozenset[str], frozenset[str], frozenset[str], bool], tuple[tuple[str, int], ...]
] = {}


def next_action(
    choices: Choices,
    state: PoolState,
    ctx: draw.Context,
    operations: frozenset[str],
    level: Level,
) -> Action | None:
    """The next action: first its kind (weighted towards the ones that build state), then
    the action itself; at the robustness level sometimes one that breaks a rule. ``None``
    when the broken rule drawn cannot be broken in this state."""
    ctx.observe(state)
    options = kinds(state, ctx, operations, level)
    # Hypothesis draws the first option far more often than its weight says (get_new_blocks
    # took 41% of the steps for a weight of 20%): start the list at a place the pool's
    # state decides, so that no operation always gets that surplus
    start = (sum(state.ref_cnt) + len(state.free_queue) + len(state.cache)) % len(options)
    kind = choices.weighted(options[start:] + options[:start], "operation")
    if kind != "out_of_contract":
        drawn = DRAWERS[kind](choices, state, ctx)
        if not level.out_of_contract and violation(state, drawn) is not None:
            # The drawers follow the seed's contract; a profile may narrow it (an older
            # release's cache_full_blocks taking no null block, say): such an action is
            # not drawn at the levels that stay inside the contract.
            return None
        if level.consumer is not None and not manager_could_call(state, drawn):
            return None  # the events level: caching calls as a manager makes them
        return drawn
    drawers = [d for op, ds in draw.BAD_DRAWERS.items() if op in operations for d in ds]
    action = choices.choice(drawers, "broken rule")(choices, state, ctx)
    if action is None or violation(state, action) is None:
        return None
    if isinstance(action, FreeBlocks) and action.foreign and not ctx.peer:
        return None
    return action


def apply_in_case(
    apply: Callable[[Any], object],
    action: Any,
    known: frozenset[str],
    record: RunRecord | None = None,
) -> None:
    """Run one action of a drawn test case. A failure of a kind in ``known`` drops the test
    case (Hypothesis's ``reject``: look for something new), counted in ``record``; any
    other is raised."""
    try:
        apply(action)
    except ExpectedEnd:
        if record is not None:
            record.expected_ended += 1
        reject()
    except Exception as exc:
        if not isinstance(exc, Nonconformance) and fault_of(exc) != "target":
            raise  # a usage error or a bug in kvpool: never a finding, never dropped
        message = str(exc) if isinstance(exc, Nonconformance) else f"{type(exc).__name__}: {exc}"
        if signature(message) in known:
            if record is not None:
                record.rejected += 1
            reject()
        raise


def pool_case(factory: TargetFactory, profile: Profile, level: Level, max_blocks: int) -> Start:
    """Test cases of the pool machine at ``level`` for the seeded search: a pool of up to
    ``max_blocks`` blocks drawn, then one action drawn and run in lockstep per step (a
    draw that gives no action, or one the target does not take, counted as skipped)."""

    def start(choices: Choices, record: RunRecord) -> Step:
        config = draw.pool_config(choices, max_blocks, level.out_of_contract)
        run = LockstepRun(factory, profile, level, config, record)
        ctx = draw.Context(
            evict_first=run.evict_first, peer=run.peer, for_events=run.events is not None
        )

        def step(choices: Choices) -> None:
            action = next_action(choices, run.state, ctx, run.operations, level)
            if action is None or not run.can_apply(action):
                record.skipped += 1
            else:
                run.apply(action)

        return step

    return start
