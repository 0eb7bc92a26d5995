"""The adapter contract for a KV cache manager under test.

A scheduler step on a request becomes one or more calls: ``admit`` / ``resume`` /
``append`` schedule; a forward pass is ``prepare_write`` (copy-on-write destinations),
then the engine copies data, then ``copies_done`` (the manager releases what it held for
the copies and moves cache entries), then the engine writes, then ``commit`` (registration
and sliding windows). Splitting it lets the suite check every copy and write against the
pool at the moment it happens. Results use the spec's :class:`Scheduled` (block ids).

Between handing out copies and ``copies_done`` a request may only be preempted or
finished (which releases what was held for the copies without moving any key); our
manager refuses anything else with rule ``copies-pending``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kvpool.spec import PoolConfig, Profile
from kvpool.spec.manager import ManagerConfig, Scheduled

from ..pool.target import PoolView


@dataclass(frozen=True)
class RequestSetup:
    """How one request-level test case is built: the manager over a pool."""

    manager: ManagerConfig
    pool: PoolConfig


@runtime_checkable
class ManagerTarget(Protocol):
    """A KV cache manager under test (see the module docstring for the call order)."""

    name: str
    #: What its pool shows, from :data:`~kvpool.conformance.machines.pool.target.OBSERVABLES`.
    observes: frozenset[str]

    def admit(
        self, request_id: str, tokens: tuple[int, ...], salt: str | None
    ) -> Scheduled | None: ...

    def resume(self, request_id: str) -> Scheduled | None: ...

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None: ...

    def prepare_write(self, request_id: str) -> Scheduled | None: ...

    def copies_done(self, request_id: str) -> None: ...

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled: ...

    def preempt(self, request_id: str) -> None: ...

    def finish(self, request_id: str) -> None: ...

    def reset_prefix_cache(self) -> bool: ...

    def evict_cached(self, block_ids: tuple[int, ...]) -> None:
        """Evict these cached blocks, which no request holds, from the prefix cache."""
        ...

    def is_block_writable(self, block: int) -> bool: ...

    def view(self) -> PoolView:
        """The manager's pool, as far as it can be seen."""
        ...

    def structure_problems(self) -> list[str]: ...


#: Builds a fresh manager for one test case.
ManagerTargetFactory = Callable[[RequestSetup, Profile], ManagerTarget]
