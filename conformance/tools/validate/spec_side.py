"""The spec's manager replaying an engine's requests, and the stream its pool publishes.

Each request runs alone, as the engine ran it: admitted with its prompt and salt, computed,
grown by its decoded tokens and computed again, finished; then the pool's events are
taken. A request the spec cannot run (a prompt longer than the pool, no room) is a
:class:`ReplayError`: the log does not fit the settings it states.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpool.spec import (
    ContractViolation,
    PoolConfig,
    Profile,
    TakeEvents,
    initial_state,
    step,
)
from kvpool.spec import events as spec_events
from kvpool.spec.manager import ManagerConfig
from kvpool.spec.manager.actions import Admit, Append, Compute, Finish, RequestAction
from kvpool.spec.manager.state import Scheduled, block_hashes, initial_manager_state
from kvpool.spec.manager.step import manager_step

from ...machines.events.check import taken_events
from .ledger import Ledger
from .request_log import LoggedRequest, RequestLog


class ReplayError(ValueError):
    """The spec's manager cannot run a logged request; the message says which and why."""


@dataclass(frozen=True)
class SpecStep:
    """What the spec did for one request: the tokens it found cached, and its events."""

    cached_tokens: int
    events: tuple[spec_events.Event, ...]


class SpecReplay:
    """The spec's manager and pool, and the tokens of every block hash it has stored."""

    def __init__(self, log: RequestLog, profile: Profile) -> None:
        self.block_size = log.block_size
        self.pool_config = PoolConfig(
            log.num_gpu_blocks,
            enable_caching=True,
            hash_block_size=log.block_size,
            enable_kv_cache_events=True,
        )
        self.pool = initial_state(self.pool_config, profile)
        self.state = initial_manager_state(
            ManagerConfig(log.block_size),
            self.pool_config,
            profile.key_attributes,
            window_unkeyed_free_first=profile.window_unkeyed_free_first,
        )
        self.partitions = profile.key_attributes
        #: A block hash of the spec's -> the tokens of that block.
        self.tokens: dict[bytes, tuple[int, ...]] = {}

    def run(self, request: LoggedRequest) -> SpecStep:
        rid = request.request_id
        admitted = self.act(Admit(rid, request.prompt, request.salt), request)
        if not isinstance(admitted, Scheduled):
            raise ReplayError(
                f"request {rid!r}: the spec's manager has no room for its "
                f"{len(request.prompt)} tokens in {self.pool_config.num_gpu_blocks} blocks"
            )
        self.act(Compute(rid), request)
        if request.decoded:
            if self.act(Append(rid, request.decoded), request) is None:
                raise ReplayError(f"request {rid!r}: no room for its decoded tokens")
            self.act(Compute(rid), request)
        self.learn(rid)
        self.act(Finish(rid), request)
        self.pool, taken = step(self.pool, TakeEvents())
        return SpecStep(admitted.num_computed_tokens, taken_events(taken.result))

    def act(self, action: RequestAction, request: LoggedRequest) -> object:
        try:
            self.pool, self.state, result = manager_step(self.pool, self.state, action)
        except ContractViolation as exc:
            raise ReplayError(
                f"request {request.request_id!r}: the spec's manager refuses "
                f"{action.operation}: {exc}"
            ) from None
        return result

    def learn(self, rid: str) -> None:
        """Remember the tokens behind each block hash of request ``rid``."""
        request = self.state.requests[rid]
        size = self.block_size
        for index, block_hash in enumerate(block_hashes(request, size, self.partitions)):
            self.tokens.setdefault(block_hash, request.tokens[index * size : (index + 1) * size])

    def feed(self, ledger: Ledger, events: tuple[spec_events.Event, ...]) -> None:
        """The spec's events into ``ledger``."""
        for event in events:
            if isinstance(event, spec_events.BlockStored):
                chunks = [self.tokens[h] for h in event.block_hashes if h in self.tokens]
                known = chunks if len(chunks) == len(event.block_hashes) else None
                ledger.stored(event.group_id, event.block_hashes, event.parent_block_hash, known)
            elif isinstance(event, spec_events.BlockRemoved):
                ledger.removed(event.group_id, event.block_hash)
            else:
                ledger.cleared()
