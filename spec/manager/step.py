"""``manager_step``: the request model as one function, over the spec's pool.

The caller's contract is checked first (:func:`request_violation`); then the request action
runs as a program of pool calls (:func:`apply_request`), which the conformance suite can
also run against a pool under test. Each action's check and program are named once, in
:data:`TRANSITIONS`, in the order of the request actions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

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
#: Why an action is outside the scheduler's contract, or ``None``.
RequestCheck = Callable[[ManagerState, Any], ContractViolation | None]
#: An action (in contract) as a program of calls on a pool: the new state and the result.
RequestProgram = Callable[[PoolCall, ManagerState, Any], tuple[ManagerState, ManagerResult]]


def refused(action: RequestAction, rule: str, detail: str) -> ContractViolation:
    """``action`` refused for breaking ``rule``, the request named."""
    return ContractViolation(
        rule, action.operation, None, f"request {action.request_id!r}: {detail}"
    )


def admit_violation(state: ManagerState, action: Admit) -> ContractViolation | None:
    """A new request, with tokens, its extra keys inside the prompt, a known report mode."""
    tokens = action.tokens
    if action.request_id in state.requests:
        return refused(action, "request-new", "already known")
    if not tokens or any(t < 0 for t in tokens):
        return refused(action, "request-tokens", f"tokens {list(tokens)}")
    if any(f.offset + f.length > len(tokens) for f in action.extra.mm):
        return refused(action, "request-extra-keys", "a multimodal feature ends past the prompt")
    embeds = action.extra.embeds
    if embeds is not None and len(embeds) != len(tokens):
        return refused(action, "request-extra-keys", "prompt embeddings not one per token")
    if action.report_mode not in REPORT_MODES:
        return refused(action, "request-report-mode", f"report mode {action.report_mode!r}")
    return None


def admit_program(
    pool: PoolCall, state: ManagerState, action: Admit
) -> tuple[ManagerState, ManagerResult]:
    return admission.admit(
        pool,
        state,
        action.request_id,
        action.tokens,
        action.salt,
        action.extra,
        action.report_mode,
    )


def running_violation(state: ManagerState, action: RequestAction) -> ContractViolation | None:
    """The request is running."""
    request = state.requests.get(action.request_id)
    if request is None or not request.running:
        return refused(action, "request-running", "not running")
    return None


def append_violation(state: ManagerState, action: Append) -> ContractViolation | None:
    """A running request, and new tokens."""
    problem = running_violation(state, action)
    if problem is None and (not action.tokens or any(t < 0 for t in action.tokens)):
        return refused(action, "request-tokens", f"tokens {list(action.tokens)}")
    return problem


def append_program(
    pool: PoolCall, state: ManagerState, action: Append
) -> tuple[ManagerState, ManagerResult]:
    return admission.append(pool, state, action.request_id, action.tokens)


def compute_violation(state: ManagerState, action: Compute) -> ContractViolation | None:
    """A running request; a partial block cached only without a sliding-window group."""
    problem = running_violation(state, action)
    if problem is None and action.cache_partial and state.config.has_sliding_window:
        return refused(action, "partial-full-attention", "a sliding-window group is configured")
    return problem


def compute_program(
    pool: PoolCall, state: ManagerState, action: Compute
) -> tuple[ManagerState, ManagerResult]:
    return compute.compute(pool, state, action.request_id, action.cache_partial)


def preempt_program(
    pool: PoolCall, state: ManagerState, action: Preempt
) -> tuple[ManagerState, ManagerResult]:
    return release.preempt(pool, state, action.request_id), None


def resume_violation(state: ManagerState, action: Resume) -> ContractViolation | None:
    """A request waiting after a preemption."""
    request = state.requests.get(action.request_id)
    if request is None or request.running:
        return refused(action, "request-preempted", "not waiting after a preemption")
    return None


def resume_program(
    pool: PoolCall, state: ManagerState, action: Resume
) -> tuple[ManagerState, ManagerResult]:
    return admission.schedule(pool, state, state.requests[action.request_id])


def finish_violation(state: ManagerState, action: Finish) -> ContractViolation | None:
    """A known request, running or not."""
    if action.request_id not in state.requests:
        return refused(action, "request-known", "unknown")
    return None


def finish_program(
    pool: PoolCall, state: ManagerState, action: Finish
) -> tuple[ManagerState, ManagerResult]:
    return release.finish(pool, state, action.request_id), None


def reset_cache_violation(state: ManagerState, action: ResetCache) -> ContractViolation | None:
    """Always in contract."""
    return None


def reset_cache_program(
    pool: PoolCall, state: ManagerState, action: ResetCache
) -> tuple[ManagerState, ManagerResult]:
    return state, release.reset_cache(pool, state)


def evict_cached_violation(state: ManagerState, action: EvictCached) -> ContractViolation | None:
    """Real blocks that no request holds."""
    held = state.held_blocks()
    top = state.pool_config.num_gpu_blocks
    if any(not 0 < b < top or b in held for b in action.block_ids):
        return refused(action, "evict-unheld", f"blocks {list(action.block_ids)}")
    return None


def evict_cached_program(
    pool: PoolCall, state: ManagerState, action: EvictCached
) -> tuple[ManagerState, ManagerResult]:
    release.evict_cached(pool, action.block_ids)
    return state, None


#: action type -> (contract check, program of pool calls)
TRANSITIONS: dict[type[RequestAction], tuple[RequestCheck, RequestProgram]] = {
    Admit: (admit_violation, admit_program),
    Append: (append_violation, append_program),
    Compute: (compute_violation, compute_program),
    Preempt: (running_violation, preempt_program),
    Resume: (resume_violation, resume_program),
    Finish: (finish_violation, finish_program),
    ResetCache: (reset_cache_violation, reset_cache_program),
    EvictCached: (evict_cached_violation, evict_cached_program),
}


def request_violation(state: ManagerState, action: RequestAction) -> ContractViolation | None:
    """Why ``action`` is outside the scheduler's contract, or ``None``."""
    check, _ = transition_of(action)
    return check(state, action)


def apply_request(
    pool: PoolCall, state: ManagerState, action: RequestAction
) -> tuple[ManagerState, ManagerResult]:
    """Run ``action`` (in contract) as calls on ``pool``; the new state and the result
    (its ``resent``: the stores this action's lookups re-sent)."""
    _, program = transition_of(action)
    if state.resent:
        state = replace(state, resent=())
    return program(pool, state, action)


def transition_of(action: RequestAction) -> tuple[RequestCheck, RequestProgram]:
    """``action``'s check and program (a ``TypeError`` for what is not a request action)."""
    entry = TRANSITIONS.get(type(action))
    if entry is None:
        raise TypeError(f"not a request action: {action!r}")
    return entry


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
