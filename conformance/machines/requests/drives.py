"""How a request action is driven on a manager under test, one function per operation.

Each operation has two drives, both named in its record of the request table
(:data:`~.operations.REQUEST_OPERATIONS`):

- the *checked* drive of a lockstep run (:class:`~.manager_run.ManagerRun`): the calls of
  the manager protocol, with the request-level properties told what happened before and
  after each (the engine's copies and writes made and guarded in between);
- the *bare* drive of a benchmark (:mod:`..bench.managers`): the same calls and nothing
  else, as a scheduler step makes them.
"""

from __future__ import annotations

from typing import Any, Protocol

from kvpool.spec.manager import (
    INCREMENTAL,
    NO_EXTRA,
    Admit,
    Append,
    Compute,
    EvictCached,
    ManagerResult,
    RequestAction,
    Scheduled,
)

from ..pool.surface import SurfaceMismatch
from .checks import RequestChecks
from .target import ManagerTarget


class ManagerRun(Protocol):
    """What a checked drive needs of a lockstep run (:class:`~.manager_run.ManagerRun`)."""

    target: ManagerTarget
    checks: RequestChecks

    @property
    def report_modes_taken(self) -> frozenset[str]: ...

    def copied(
        self,
        rid: str,
        result: Scheduled,
        fresh: bool,
        kept: int | None = None,
        cached: int | None = None,
    ) -> Scheduled: ...

    def compute(self, rid: str, cache_partial: bool) -> Scheduled | None: ...


# --- checked: a lockstep run ---------------------------------------------------------------


def checked_admit(run: ManagerRun, action: RequestAction) -> ManagerResult:
    assert isinstance(action, Admit)
    t, checks, rid = run.target, run.checks, action.request_id
    checks.admitted(rid, action.tokens, action.salt, action.extra)
    cached = checks.cached_prefix(rid, t.view())
    # only a manager that declares extra_keys_taken (report_modes_taken) is given them
    given: dict[str, Any] = {} if action.extra == NO_EXTRA else {"extra": action.extra}
    mode = action.report_mode
    if mode != INCREMENTAL:
        if mode not in run.report_modes_taken:  # a trace made on another manager
            raise SurfaceMismatch(
                f"manager {t.name!r} takes no request in the {mode!r} report mode (its "
                "report_modes_taken)"
            )
        given["report_mode"] = mode
    admit: Any = t.admit
    result = admit(rid, action.tokens, action.salt, **given)
    if result is None:
        del checks.requests[rid]
        return None
    return run.copied(rid, result, fresh=True, cached=cached)


def checked_resume(run: ManagerRun, action: RequestAction) -> ManagerResult:
    rid = action.request_id
    kept = run.checks.kept_blocks(rid, run.target.view())
    result = run.target.resume(rid)
    return None if result is None else run.copied(rid, result, True, kept)


def checked_append(run: ManagerRun, action: RequestAction) -> ManagerResult:
    assert isinstance(action, Append)
    t, rid = run.target, action.request_id
    result = t.append(rid, action.tokens)
    if result is not None:
        run.checks.appended(rid, action.tokens)
        run.checks.scheduled(rid, result, t.view(), fresh=False)
    return result


def checked_compute(run: ManagerRun, action: RequestAction) -> ManagerResult:
    assert isinstance(action, Compute)
    return run.compute(action.request_id, action.cache_partial)


def checked_preempt(run: ManagerRun, action: RequestAction) -> ManagerResult:
    run.target.preempt(action.request_id)
    run.checks.released(action.request_id, run.target.view(), finished=False)
    return None


def checked_finish(run: ManagerRun, action: RequestAction) -> ManagerResult:
    run.target.finish(action.request_id)
    run.checks.released(action.request_id, run.target.view(), finished=True)
    return None


def checked_reset(run: ManagerRun, action: RequestAction) -> ManagerResult:
    return run.target.reset_prefix_cache()


def checked_evict(run: ManagerRun, action: RequestAction) -> ManagerResult:
    assert isinstance(action, EvictCached)
    run.target.evict_cached(action.block_ids)
    return None


# --- bare: a benchmark ---------------------------------------------------------------------


def bare_admit(t: ManagerTarget, action: RequestAction) -> ManagerResult:
    assert isinstance(action, Admit)
    result = t.admit(action.request_id, action.tokens, action.salt)
    if result is not None:
        t.copies_done(action.request_id)  # the engine has made the copies of a partial hit
    return result


def bare_resume(t: ManagerTarget, action: RequestAction) -> ManagerResult:
    result = t.resume(action.request_id)
    if result is not None:
        t.copies_done(action.request_id)
    return result


def bare_append(t: ManagerTarget, action: RequestAction) -> ManagerResult:
    assert isinstance(action, Append)
    return t.append(action.request_id, action.tokens)


def bare_compute(t: ManagerTarget, action: RequestAction) -> ManagerResult:
    assert isinstance(action, Compute)
    rid = action.request_id
    prepared = t.prepare_write(rid)
    if prepared is None:
        return None
    t.copies_done(rid)
    final = t.commit(rid, action.cache_partial)
    return Scheduled(final.num_computed_tokens, final.tables, prepared.copies)


def bare_preempt(t: ManagerTarget, action: RequestAction) -> ManagerResult:
    t.preempt(action.request_id)
    return None


def bare_finish(t: ManagerTarget, action: RequestAction) -> ManagerResult:
    t.finish(action.request_id)
    return None
