"""nano-vllm's ``BlockManager`` driven as a KV cache manager by the request machine.

nano-vllm's manager is its own pool: a list of blocks with ``ref_count``, ``hash`` and
``token_ids``, a free deque, and ``hash_to_block_id``. Its scheduler calls
``can_allocate``/``allocate(seq)`` to admit (hits found by chained xxh64 hashes of full
blocks, confirmed by comparing the block's tokens), ``can_append``/``may_append(seq)`` once
per new token (a new block when the token starts one, the block registered when the token
fills it) and ``deallocate(seq)`` to finish or preempt. The request protocol maps onto it:

=======================  ================================================================
protocol call            ``BlockManager``
=======================  ================================================================
``admit``                a new ``Sequence``; ``can_allocate`` then ``allocate``
``resume``               ``can_allocate`` then ``allocate`` of the preempted sequence
``append(tokens)``       per token ``append_token``, ``can_append``, ``may_append``
                         (tried on a copy first: ``None``, nothing changed, when
                         ``can_append`` refuses one)
``prepare_write`` /      nothing: it copies nothing and registers when it schedules;
``commit``               the engine's count of computed tokens moves to the end
``preempt`` / ``finish`` ``deallocate``
``reset_prefix_cache``   not offered: it has none (never drawn for it)
=======================  ================================================================

It is checked by the request-level properties, not beside the spec's manager: its policy
(a hit may cover the whole prompt, blocks keyed when scheduled, no null block, every freed
block to the back) is not the spec manager's, and the properties are the contract a
scheduler depends on. Setups it cannot take are narrowed before the run: one
full-attention group, caching on; a salted request is never drawn (it has no salts).

**Ids.** It has no null block: built with ``num_gpu_blocks - 1`` blocks, its block ``b`` is
the suite's ``b + 1`` (block 0 stays the null block, never used).

**Keys.** Its hash of a block is an integer chained over the prefix; the adapter records,
for every hash it sees the manager register, the spec's key of the same prefix (both are
functions of the tokens up to the block's end), and shows each block's hash as that key.
A hash it never saw registered is shown as its raw bytes.

**What it shows.** The free deque (reuse order), ``ref_count`` per block, each block's key,
``hash_to_block_id`` as the index, and its structure: every index entry names a block
carrying that hash (``map-matches-block-keys``; upstream issue #163), the free deque and
``used_block_ids`` partition the blocks, and free blocks have ``ref_count`` 0.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.manager import (
    FULL_ATTENTION,
    Admit,
    Finish,
    ManagerConfig,
    Preempt,
    RequestAction,
    ResetCache,
    Scheduled,
)
from kvpool.spec.manager.properties import expected_key

from ...machines.pool.target import PoolView
from ...machines.requests.target import RequestSetup
from ...targets.manager_factory import ReleaseManagerFactory
from .release import NanoVllmRelease

OBSERVES = frozenset({"free_queue", "ref_cnt", "keys", "index", "structure"})


def suite_id(block: int) -> int:
    return int(block) + 1


def nano_id(block: int) -> int:
    return block - 1


def supported_setup(setup: RequestSetup) -> RequestSetup:
    """``setup`` narrowed to what nano-vllm's manager has: one full-attention group and
    prefix caching on (it cannot turn it off)."""
    manager = ManagerConfig(setup.manager.block_size, (FULL_ATTENTION,))
    return RequestSetup(manager, replace(setup.pool, enable_caching=True))


@dataclass
class _Request:
    seq: Any
    computed: int = 0
    running: bool = True
    tokens: list[int] = field(default_factory=list)


class NanoVllmManagerTarget:
    """One nano-vllm ``BlockManager`` behind the manager-target protocol."""

    #: Judged by the request-level properties alone (see the module docstring).
    checked_by_properties = True
    observes = OBSERVES
    #: It registers a block's key when it schedules the block, before its KV is written.
    registers_when_scheduled = True

    def __init__(self, release: NanoVllmRelease, setup: RequestSetup, name: str) -> None:
        self.name = name
        self.version = release.label
        self.setup = setup
        self.bs = setup.manager.block_size
        self.hbs = setup.pool.hash_block_size
        self.num_blocks = setup.pool.num_gpu_blocks - 1
        base = release.sequence.Sequence
        self.Sequence = type("Sequence", (base,), {"block_size": self.bs})
        self.manager: Any = release.block_manager.BlockManager(self.num_blocks, self.bs)
        self.requests: dict[str, _Request] = {}
        #: nano-vllm's hash of a prefix -> the spec's key of that prefix.
        self.keys: dict[int, bytes] = {}

    # --- the protocol ---------------------------------------------------------------------

    def allows(self, action: RequestAction) -> bool:
        """It has no salts and no way to reset its cache: neither is drawn for it. A
        request never leaves while a block it keyed when scheduled is still to be written:
        nano-vllm's scheduler (upstream 82f5ca2, ``scheduler.py``) runs every request it
        schedules in that step's forward pass, preempts only in its decode phase before
        ``may_append`` (lines 46-51), finishes only in ``postprocess`` after the pass (line
        70), and has no abort."""
        if isinstance(action, ResetCache):
            return False
        if isinstance(action, (Finish, Preempt)):
            return not self._keyed_unwritten(action.request_id)
        return not (isinstance(action, Admit) and action.salt is not None)

    def _keyed_unwritten(self, request_id: str) -> bool:
        """Whether the request holds a block keyed at scheduling that its pass has not
        written yet (a full block ending past its computed tokens)."""
        request = self.requests.get(request_id)
        if request is None or not request.running:
            return False
        blocks = self.manager.blocks
        return any(
            int(blocks[b].hash) != -1 and (i + 1) * self.bs > request.computed
            for i, b in enumerate(request.seq.block_table)
        )

    def admit(self, request_id: str, tokens: tuple[int, ...], salt: str | None) -> Scheduled | None:
        if salt is not None:
            raise NotImplementedError("nano-vllm's Sequence has no salt")
        request = _Request(self.Sequence(list(tokens)), tokens=list(tokens))
        if not self.manager.can_allocate(request.seq):
            return None
        self.manager.allocate(request.seq)
        self.requests[request_id] = request
        request.computed = int(request.seq.num_cached_tokens)
        self._learn(request)
        return self._scheduled(request)

    def resume(self, request_id: str) -> Scheduled | None:
        request = self.requests[request_id]
        if not self.manager.can_allocate(request.seq):
            return None
        self.manager.allocate(request.seq)
        request.running = True
        request.computed = int(request.seq.num_cached_tokens)
        self._learn(request)
        return self._scheduled(request)

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        """Per token, as its scheduler's decode step: the token appended, then
        ``can_append`` and ``may_append``. Tried first on a copy of the manager and the
        sequence, so that a token ``can_append`` refuses leaves the real ones unchanged."""
        request = self.requests[request_id]
        # a Sequence pickles (and so copies) without its tokens once it has an output:
        # the trial one is built from them, with the same table
        trial = self.Sequence(list(request.seq.token_ids))
        trial.block_table = list(request.seq.block_table)
        manager = copy.deepcopy(self.manager)
        if not all(_appended(manager, trial, token) for token in tokens):
            return None
        for token in tokens:
            _appended(self.manager, request.seq, token)
            request.tokens.append(token)
        self._learn(request)
        return self._scheduled(request)

    def prepare_write(self, request_id: str) -> Scheduled | None:
        return self._scheduled(self.requests[request_id])

    def copies_done(self, request_id: str) -> None:
        return None

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        request = self.requests[request_id]
        request.computed = len(request.seq)
        return self._scheduled(request)

    def preempt(self, request_id: str) -> None:
        request = self.requests[request_id]
        self.manager.deallocate(request.seq)
        request.running, request.computed = False, 0

    def finish(self, request_id: str) -> None:
        request = self.requests.pop(request_id)
        if request.running:
            self.manager.deallocate(request.seq)

    def reset_prefix_cache(self) -> bool:
        raise NotImplementedError("nano-vllm's BlockManager has no way to forget its cache")

    def is_block_writable(self, block: int) -> bool:
        """A block held once (by the writer): it has no such query; this is what its
        engine relies on (it writes every block it scheduled)."""
        if block < 1 or block > self.num_blocks:
            return False
        return int(self.manager.blocks[nano_id(block)].ref_count) == 1

    # --- keys -----------------------------------------------------------------------------

    def _scheduled(self, request: _Request) -> Scheduled:
        table = tuple(suite_id(b) for b in request.seq.block_table)
        return Scheduled(request.computed, (table,))

    def _learn(self, request: _Request) -> None:
        """Record the spec key of every full block the request's table has registered."""
        hashes = request_block_hashes(tuple(request.tokens), self.hbs, None)
        for i, b in enumerate(request.seq.block_table):
            h = int(self.manager.blocks[b].hash)
            if h != -1 and (i + 1) * self.bs <= len(request.tokens):
                self.keys.setdefault(h, expected_key(hashes, self.hbs, self.bs, i, 0))

    def _key(self, h: int) -> bytes:
        key = self.keys.get(h)
        return key if key is not None else h.to_bytes(8, "little")

    # --- looking inside -------------------------------------------------------------------

    def view(self) -> PoolView:
        m = self.manager
        keys = [frozenset[bytes]()]
        primary: list[bytes | None] = [None]
        for block in m.blocks:
            h = int(block.hash)
            key = None if h == -1 else self._key(h)
            keys.append(frozenset([key]) if key is not None else frozenset())
            primary.append(key)
        index = tuple(
            sorted((self._key(int(h)), (suite_id(b),)) for h, b in m.hash_to_block_id.items())
        )
        return PoolView(
            free_count=len(m.free_block_ids),
            free_queue=tuple(suite_id(b) for b in m.free_block_ids),
            ref_cnt=(0, *(int(b.ref_count) for b in m.blocks)),
            keys=tuple(keys),
            primary=tuple(primary),
            index=index,
        )

    def structure_problems(self) -> list[str]:
        m = self.manager
        problems = []
        for h, b in sorted(m.hash_to_block_id.items(), key=lambda item: item[1]):
            if int(m.blocks[b].hash) != int(h):
                problems.append(
                    f"invariant 'map-matches-block-keys': hash_to_block_id names block "
                    f"{suite_id(b)} for key {self._key(int(h)).hex()[:12]}, which the block "
                    "no longer carries (a stale entry)"
                )
        free = list(m.free_block_ids)
        if len(free) != len(set(free)):
            problems.append(f"the free deque lists a block twice: {[suite_id(b) for b in free]}")
        if set(free) & set(m.used_block_ids) or len(set(free) | set(m.used_block_ids)) != len(
            m.blocks
        ):
            problems.append("the free deque and used_block_ids do not partition the blocks")
        for b in free:
            if int(m.blocks[b].ref_count) != 0:
                problems.append(
                    f"block {suite_id(b)} is free with ref_count {int(m.blocks[b].ref_count)}"
                )
        return problems


def _appended(manager: Any, seq: Any, token: int) -> bool:
    """One token of a decode step, as nano-vllm's engine takes it: ``postprocess`` appends
    it to the sequence, the next ``schedule`` asks ``can_append`` and, granted,
    ``may_append``; whether it was granted."""
    seq.append_token(token)
    if not manager.can_append(seq):
        return False
    manager.may_append(seq)
    return True


NanoVllmManagerFactory = ReleaseManagerFactory[NanoVllmRelease, NanoVllmManagerTarget]


def nanovllm_managers(release: NanoVllmRelease, name: str) -> NanoVllmManagerFactory:
    """Managers from ``release``, every setup narrowed by :func:`supported_setup`."""
    return ReleaseManagerFactory(release, name, NanoVllmManagerTarget, supported_setup)
