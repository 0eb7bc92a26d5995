"""``manager_step``: the request model as one function, over the spec's pool.

The caller's contract is checked first (:func:`request_violation`); then the request action
runs as a program of pool calls (:func:`apply_request`), which the conformance suite can
also run against a pool under test.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ..errors import ContractViolation
from ..invariants import invariants_hold  # noqa: F401  (read by the docstring contracts)
from ..state import PoolState
from . import admission, compute, release
from .actions import (
    Admit,
    Append,
    Compute,
    EvictCached,
    Finish,
    Preempt,
    RequestAction,
    ResetCache,
    Resume,
)
from .pool import PoolCall, SpecPool
from .report import REPORT_MODES
from .state import ManagerState, Scheduled

#: What a request action returns: a schedule (``None`` when there was no room), the reset's
#: verdict, or nothing.
ManagerResult = Scheduled | bool | None


def request_violation(state: ManagerState, action: RequestAction) -> ContractViolation | None:
    """Why ``action`` is outside the scheduler's contract, or ``None``."""
    op = action.operation
    request = state.requests.get(action.request_id)

    def broken(rule: str, detail: str) -> ContractViolation:
        return ContractViolation(rule, op, None, f"request {action.request_id!r}: {detail}")

    match action:
        case Admit(tokens=tokens):
            if request is not None:
                return broken("request-new", "already known")
            if not tokens or any(t < 0 for t in tokens):
                return broken("request-tokens", f"tokens {list(tokens)}")
            if any(f.offset + f.length > len(tokens) for f in action.extra.mm):
                return broken("request-extra-keys", "a multimodal feature ends past the prompt")
            embeds = action.extra.embeds
            if embeds is not None and len(embeds) != len(tokens):
                return broken("request-extra-keys", "prompt embeddings not one per token")
            if action.report_mode not in REPORT_MODES:
                return broken("request-report-mode", f"report mode {action.report_mode!r}")
        case Append(tokens=tokens):
            if request is None or not request.running:
                return broken("request-running", "not running")
            if not tokens or any(t < 0 for t in tokens):
                return broken("request-tokens", f"tokens {list(tokens)}")
        case Compute(cache_partial=cache_partial):
            if request is None or not request.running:
                return broken("request-running", "not running")
            if cache_partial and state.config.has_sliding_window:
                return broken("partial-full-attention", "a sliding-window group is configured")
        case Preempt():
            if request is None or not request.running:
                return broken("request-running", "not running")
        case Resume():
            if request is None or request.running:
                return broken("request-preempted", "not waiting after a preemption")
        case Finish():
            if request is None:
                return broken("request-known", "unknown")
        case EvictCached(block_ids=block_ids):
            held = state.held_blocks()
            top = state.pool_config.num_gpu_blocks
            if any(not 0 < b < top or b in held for b in block_ids):
                return broken("evict-unheld", f"blocks {list(block_ids)}")
    return None


def apply_request(
    pool: PoolCall, state: ManagerState, action: RequestAction
) -> tuple[ManagerState, ManagerResult]:
    """Run ``action`` (in contract) as calls on ``pool``; the new state and the result
    (its ``resent``: the stores this action's lookups re-sent)."""
    if state.resent:
        state = replace(state, resent=())
    match action:
        case Admit(request_id=rid, tokens=tokens, salt=salt, extra=extra, report_mode=mode):
            return admission.admit(pool, state, rid, tokens, salt, extra, mode)
        case Append(request_id=rid, tokens=tokens):
            return admission.append(pool, state, rid, tokens)
        case Compute(request_id=rid, cache_partial=cache_partial):
            return compute.compute(pool, state, rid, cache_partial)
        case Preempt(request_id=rid):
            return release.preempt(pool, state, rid), None
        case Resume(request_id=rid):
            return admission.schedule(pool, state, state.requests[rid])
        case Finish(request_id=rid):
            return release.finish(pool, state, rid), None
        case ResetCache():
            return state, release.reset_cache(pool, state)
        case EvictCached(block_ids=block_ids):
            release.evict_cached(pool, block_ids)
            return state, None
    raise TypeError(f"not a request action: {action!r}")


def holds_match_tables(pool: PoolState, state: ManagerState) -> bool:
    """The manager is its pool's only user: every real block is held exactly as many times
    as table entries name it."""
    holds = Counter(b for r in state.requests.values() for t in r.tables for b in t if b)
    return all(pool.ref_cnt[b] == holds[b] for b in range(1, pool.num_blocks))


def manager_step(
    pool_state: PoolState, state: ManagerState, action: RequestAction
) -> tuple[PoolState, ManagerState, ManagerResult]:
    """Apply ``action`` to the manager and its spec pool.

    Raises :class:`ContractViolation` (nothing changed) for an action outside the contract.

    pre: invariants_hold(pool_state)
    pre: holds_match_tables(pool_state, state)
    pre: request_violation(state, action) is None
    post: invariants_hold(__return__[0])
    post: holds_match_tables(__return__[0], __return__[1])
    """
    problem = request_violation(state, action)
    if problem is not None:
        raise problem
    pool = SpecPool(pool_state)
    state, result = apply_request(pool, state, action)
    return pool.state, state, result
