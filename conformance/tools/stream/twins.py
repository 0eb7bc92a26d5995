"""Twin requests: one prompt sent twice at once, so that the pool caches it twice.

Two requests with the same prompt admitted before either is computed each get fresh
blocks, and each registers its full blocks: every hash of the prompt is then cached in two
blocks, and the pool publishes a ``BlockStored`` for each copy. This happens in serving
whenever identical prompts are scheduled in one step (parallel sampling, a burst of one
system prompt). :class:`Twins` wraps a workload's request step: the first ``count``
admissions are preceded by a twin admission of the same prompt; once the original is
computed, the twin is computed and finished (its blocks go back to the free queue, still
cached, and are evicted later: one ``BlockRemoved`` while the other copy stays).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kvpool.spec.manager import Admit, Compute, Finish, ManagerResult, RequestAction

TWIN_SUFFIX = "-twin"


class Twins:
    def __init__(self, apply: Callable[[RequestAction], ManagerResult], count: int) -> None:
        self.inner = apply
        self.left = count
        self.pending: set[str] = set()
        #: Twin requests admitted (each caches its prompt a second time).
        self.admitted = 0

    def __call__(self, action: RequestAction) -> ManagerResult:
        if isinstance(action, Admit) and self.left > 0:
            twin = replace(action, request_id=action.request_id + TWIN_SUFFIX)
            if self.inner(twin) is not None:
                self.left -= 1
                self.admitted += 1
                result = self.inner(action)
                if result is None:  # the original must wait: the twin goes alone
                    self._finish(twin.request_id, compute=True)
                else:
                    self.pending.add(action.request_id)
                return result
        result = self.inner(action)
        if isinstance(action, Compute) and action.request_id in self.pending:
            self.pending.discard(action.request_id)
            self._finish(action.request_id + TWIN_SUFFIX, compute=True)
        return result

    def _finish(self, request_id: str, compute: bool) -> None:
        if compute:
            self.inner(Compute(request_id))
        self.inner(Finish(request_id))
