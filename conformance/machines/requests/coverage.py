"""Which request-level situations a run reached (read off the spec manager's steps)."""

from __future__ import annotations

from kvpool.spec.manager import (
    Admit,
    Compute,
    EvictCached,
    ManagerResult,
    ManagerState,
    RequestAction,
    ResetCache,
    Resume,
    Scheduled,
)

REQUEST_SITUATIONS = (
    "admission refused: no room",
    "prefix hit shared",
    "salted request admitted",
    "hit with a LoRA adapter, image or embeddings",
    "partial hit copied (not running)",
    "copy-on-write of a running request",
    "sliding window dropped blocks",
    "resumed from its cached prefix",
    "hits re-sent (full report mode)",
    "reset refused while held",
    "reset cleared the cache",
    "cached blocks evicted",
)


def request_situations(
    before: ManagerState, action: RequestAction, after: ManagerState, result: ManagerResult
) -> list[str]:
    seen = []
    if isinstance(action, Admit | Resume) and result is None:
        seen.append("admission refused: no room")
    if isinstance(action, ResetCache):
        seen.append("reset cleared the cache" if result else "reset refused while held")
    if isinstance(action, EvictCached) and action.block_ids:
        seen.append("cached blocks evicted")
    if after.resent:
        seen.append("hits re-sent (full report mode)")
    if isinstance(action, Admit) and action.salt is not None and result is not None:
        seen.append("salted request admitted")
    if isinstance(result, Scheduled):
        if isinstance(action, Admit | Resume) and result.num_computed_tokens:
            bs = before.config.block_size
            if result.num_computed_tokens >= bs:
                seen.append("prefix hit shared")
                if after.requests[action.request_id].extra.attributes:
                    seen.append("hit with a LoRA adapter, image or embeddings")
            if result.copies:
                seen.append("partial hit copied (not running)")
            if isinstance(action, Resume):
                seen.append("resumed from its cached prefix")
        if isinstance(action, Compute):
            if result.copies:
                seen.append("copy-on-write of a running request")
            old = before.requests[action.request_id].tables
            if sum(b == 0 for t in result.tables for b in t) > sum(b == 0 for t in old for b in t):
                seen.append("sliding window dropped blocks")
    return seen
