"""LMDeploy's block manager with its prefix trie, driven as a KV cache manager.

LMDeploy's PyTorch engine keeps a ``DefaultBlockManager`` (a ``LogicalAllocator`` with ref
counts) and a ``BlockTrie`` over it: a trie of full blocks per adapter, each node keyed by
its block's tokens (a Python ``hash`` confirmed by comparing the tokens) and holding one
reference on its block. The adapter builds the release's ``Scheduler`` and makes its calls
one request at a time (:mod:`.generations`): its prefill admission for one sequence, and
the calls the scheduler and engine make for the rest, on the release's own
``SchedulerSequenceDefault`` (``--machine engine`` drives the ``Scheduler`` itself, with
its queues: :mod:`.driver`):

=======================  ================================================================
protocol call            LMDeploy
=======================  ================================================================
``admit`` / ``resume``   a prefill turn with the sequence as the one waiting request:
                         the release's ``_PrefillScheduler.schedule`` (its tentative
                         ``BlockTrie.match``, ``try_make_capacity_for`` with
                         ``BlockTrie.evict`` of the shortfall, and on success
                         ``allocate(seq, prealloc)``, ``BlockTrie.allocate``, the new
                         full blocks keyed when scheduled, ``finalize_match``; when
                         short its own rollback of the match, and ``None``); the
                         sequence then dispatched (``READY -> RUNNING``)
``append(tokens)``       ``update_token_ids(tokens)`` as a decode step, with
                         ``schedule_running``'s rule: when the sequence needs a block
                         for one more token, room made first (``None``, nothing
                         appended, when short), then ``allocate`` and
                         ``BlockTrie.allocate``
``commit``               the forward pass done: ``update_token_ids`` of no new token
                         moves the pending tokens into the history (the sampled token
                         is the protocol's next ``append``)
``preempt``              ``preempt_seqs`` (to ``WAITING``) and the recompute eviction's
                         reclaim: ``release_paging_resources`` (its blocks freed; 0.16.0:
                         ``deactivate_seqs``, ``evict_seqs``, ``state.free()``)
``finish``               ``finish`` (or ``stop``) and ``end_sequence``: its blocks freed
``reset_prefix_cache``   not drawn: the trie has no flush
=======================  ================================================================

**Salts.** The trie keeps one root per LoRA adapter ("caches with different adapter should
not be shared"): a salted request runs under the adapter named by its salt.

**Ids.** No null block: built with ``num_gpu_blocks - 1`` blocks; its block ``b`` is the
suite's ``b + 1``.

**What it shows.** Per block the ref count less the trie's own reference (what the
requests' tables hold); the key of each attached node's block (the spec's key of the path
from its root: the tokens and the adapter as salt) and the trie as the index; the free
count as what the pool could hand out, the free blocks plus what ``BlockTrie.evict`` frees
on a copy of the trie. The free list's order is not shown (``tail-first-free`` is vLLM's
reuse order; LMDeploy's free list is a stack and the trie evicts least recently used
leaves). Structure: the allocator's (as the pool target checks it), every node's block
held and in one node only, node depths, and every block the trie alone holds freed by
``BlockTrie.evict`` (``cached-blocks-evictable``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

from kvpool.spec import Profile
from kvpool.spec.manager import (
    FULL_ATTENTION,
    Append,
    EvictCached,
    Finish,
    ManagerConfig,
    Preempt,
    RequestAction,
    ResetCache,
    Scheduled,
)
from kvpool.spec.manager.extra_keys import NO_EXTRA, partitioned_block_hashes
from kvpool.spec.manager.properties import expected_key

from ...machines.pool.target import PoolView
from ...machines.requests.target import RequestSetup
from .allocator import allocator_problems, spec_id
from .generations import SchedulerCalls
from .manager_release import LmdeployManagerRelease
from .release import numpy_module

OBSERVES = frozenset({"ref_cnt", "keys", "index", "structure"})
#: The one attribute a trie key carries: the adapter, in the place of a salt.
SALT_ONLY = frozenset({"cache-salt"})
#: Tokens reserved beyond a sequence when it is scheduled (see :class:`LmdeployManagerFactory`).
PREALLOC_TOKENS = 1


def supported_setup(setup: RequestSetup) -> RequestSetup:
    """``setup`` narrowed to one full-attention group (the default block manager; the
    window block manager is another class)."""
    return replace(setup, manager=ManagerConfig(setup.manager.block_size, (FULL_ATTENTION,)))


@dataclass
class _Request:
    seq: Any
    running: bool = True


@dataclass(frozen=True)
class _Grown:
    """A sequence as it will be with ``extra`` more tokens: what ``num_required_blocks``
    reads of it, to ask LMDeploy's rule before the tokens are appended."""

    seq: Any
    extra: int

    @property
    def num_all_ids(self) -> int:
        return int(self.seq.num_all_ids) + self.extra

    @property
    def kv_token_limit(self) -> int | None:
        limit: int | None = self.seq.kv_token_limit
        return limit

    @property
    def block_size(self) -> int:
        return int(self.seq.block_size)

    @property
    def logical_blocks(self) -> Any:
        return self.seq.logical_blocks


class LmdeployManagerTarget:
    """One ``DefaultBlockManager`` and ``BlockTrie`` behind the manager-target protocol."""

    #: Judged by the request-level properties alone: its policy (keys when scheduled,
    #: preallocation, a hit's duplicate swapped in) is not the spec manager's.
    checked_by_properties = True
    observes = OBSERVES
    #: ``BlockTrie.allocate`` attaches a full block when the sequence is scheduled.
    registers_when_scheduled = True
    #: ``BlockTrie.allocate`` swaps a sequence's fresh block for the trie's block of the same
    #: tokens and frees its own.
    swaps_in_cached = True

    def __init__(
        self, release: LmdeployManagerRelease, setup: RequestSetup, name: str, prealloc: int
    ) -> None:
        self.np = numpy_module("block manager")
        self.name = name
        self.version = release.version
        self.setup = setup
        self.bs = setup.manager.block_size
        self.hbs = setup.pool.hash_block_size
        self.caching = setup.pool.enable_caching
        self.prealloc = prealloc
        self.num_blocks = setup.pool.num_gpu_blocks - 1
        self.messages = release.module("pytorch.messages")
        self.engine = SchedulerCalls(release, self.num_blocks, self.bs, self.caching)
        self.block_manager: Any = self.engine.block_manager
        self.trie: Any = self.engine.trie
        self.requests: dict[str, _Request] = {}
        self._keys: dict[tuple[str | None, tuple[int, ...]], bytes] = {}

    # --- LMDeploy's calls -----------------------------------------------------------------

    def _tokens(self, tokens: tuple[int, ...]) -> Any:
        return self.np.array(tokens, dtype=self.np.int64)

    def _schedule(self, seq: Any) -> Scheduled | None:
        """A prefill admission by the release's own scheduler (see :mod:`.generations`)."""
        if not self.engine.schedule(seq, self.prealloc):
            return None
        return self._scheduled(seq)

    def _scheduled(self, seq: Any) -> Scheduled:
        table = tuple(spec_id(b) for b in seq.logical_blocks.get_real_blocks())
        return Scheduled(int(seq.num_history_ids), (table,))

    # --- the protocol ---------------------------------------------------------------------

    def allows(self, action: RequestAction) -> bool:
        """The trie has no flush and no way to evict a chosen block: neither is drawn. A
        sequence is never preempted while a block the trie attached when it was scheduled
        is still to be written: the prefill turn evicts only sequences still waiting
        (``prefill_scheduler.py``, ``_evictable_sequences``: stopped, skipped and waiting,
        never one the turn admitted), and a decode step preempts only sequences it has not
        yet allocated for (0.16.0's ``scheduler.py``, ``_schedule_decoding``: the tail of
        ``running``, or the sequence itself before ``allocate``). Nor does one finish then:
        the engine schedules and builds the forward inputs in one synchronous call and
        hands them to the executor before it awaits anything (``engine/inputs_maker.py``,
        ``_send_next_inputs_impl``, v0.16.0 and upstream's main), so a stop or end of the
        session is handled only once the pass is under way. And no decode step comes
        before the pass of a prefill turn has computed every sequence the turn admitted
        (that one forward holds them all)."""
        if isinstance(action, (Preempt, Finish)):
            return not self._keyed_unwritten(action.request_id)
        if isinstance(action, Append):  # the turn's one pass computes every admitted sequence
            others = (r for r in self.requests if r != action.request_id)
            return not any(self._keyed_unwritten(r) for r in others)
        return not isinstance(action, ResetCache | EvictCached)

    def _keyed_unwritten(self, request_id: str) -> bool:
        """Whether the running request reached trie nodes past the tokens it computed."""
        request = self.requests.get(request_id)
        if request is None or not request.running:
            return False
        return self.keyed_tokens(request_id) > int(request.seq.num_history_ids)

    def admit(self, request_id: str, tokens: tuple[int, ...], salt: str | None) -> Scheduled | None:
        seq = self.engine.new_sequence(self._tokens(tokens), salt)
        result = self._schedule(seq)
        if result is None:
            self.engine.drop(seq)
            return None
        self.requests[request_id] = _Request(seq)
        return result

    def resume(self, request_id: str) -> Scheduled | None:
        request = self.requests[request_id]
        result = self._schedule(request.seq)
        request.running = result is not None
        return result

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        """A decode step's tokens, with ``schedule_running``'s rule for room."""
        seq = self.requests[request_id].seq
        grown = _Grown(seq, len(tokens))
        needs_block = self.block_manager.num_required_blocks(grown, 1) > 0
        if needs_block and not self.engine.make_room(grown, self.prealloc):
            return None
        mode = self.messages.UpdateTokenMode
        # after a forward pass nothing is pending: the engine's decode update; before one,
        # tokens join the pending ones as a new turn's input does
        pending = int(seq.num_token_ids) > 0
        seq.update_token_ids(self._tokens(tokens), mode=mode.INPUTS if pending else mode.DECODE)
        if needs_block:
            self.block_manager.allocate(seq, self.prealloc)
            if self.caching:
                self.trie.allocate(seq)
        return self._scheduled(seq)

    def prepare_write(self, request_id: str) -> Scheduled | None:
        return self._scheduled(self.requests[request_id].seq)

    def copies_done(self, request_id: str) -> None:
        return None

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        seq = self.requests[request_id].seq
        empty = self.np.empty((0,), dtype=self.np.int64)
        seq.update_token_ids(empty, mode=self.messages.UpdateTokenMode.DECODE)
        return self._scheduled(seq)

    def preempt(self, request_id: str) -> None:
        """``preempt_seqs``, then the reclaim that frees a waiting sequence's blocks."""
        request = self.requests[request_id]
        self.engine.preempt(request.seq)
        request.running = False

    def finish(self, request_id: str) -> None:
        request = self.requests.pop(request_id)
        self.engine.finish(request.seq, request.running)

    def reset_prefix_cache(self) -> bool:
        raise NotImplementedError("LMDeploy's BlockTrie has no flush")

    def evict_cached(self, block_ids: tuple[int, ...]) -> None:
        raise NotImplementedError("LMDeploy's BlockTrie evicts by LRU only")

    def keyed_tokens(self, request_id: str) -> int:
        """The tokens up to the deepest trie node the sequence reached: its decoded blocks
        are attached when it next needs a block, not when they are computed."""
        cursor = self.requests[request_id].seq.prefix_cache.trie_cursor
        return 0 if cursor is None else int(cursor.prefix_len)

    def is_block_writable(self, block: int) -> bool:
        """Held by exactly one table (LMDeploy has no such query: its engine writes every
        block of the table past the history)."""
        if block < 1 or block > self.num_blocks:
            return False
        return self._table_refs()[block] == 1

    # --- looking inside -------------------------------------------------------------------

    def _nodes(self, trie: Any) -> list[tuple[Any, str | None, tuple[int, ...]]]:
        """Every attached node but the roots, with its adapter and its path's tokens."""
        found: list[tuple[Any, str | None, tuple[int, ...]]] = []
        for adapter, root in trie._roots.items():
            stack: list[tuple[Any, tuple[int, ...]]] = [(root, ())]
            while stack:
                node, path = stack.pop()
                for child in node.children.values():
                    child_path = path + tuple(int(t) for t in child.token_ids)
                    found.append((child, adapter, child_path))
                    stack.append((child, child_path))
        return found

    def _key(self, adapter: str | None, path: tuple[int, ...]) -> bytes:
        key = self._keys.get((adapter, path))
        if key is None:
            # the adapter name stands where the spec's requests carry a salt
            hashes = partitioned_block_hashes(path, self.hbs, adapter, NO_EXTRA, SALT_ONLY)
            key = expected_key(hashes, self.hbs, self.bs, len(path) // self.bs - 1, 0)
            self._keys[(adapter, path)] = key
        return key

    def _counts(self) -> list[int]:
        return [int(c) for c in self.block_manager.allocator._log_mem.ref_count]

    def _table_refs(self) -> tuple[int, ...]:
        """Per suite block: the ref count less the trie's own reference."""
        counts = self._counts()
        for node, _, _ in self._nodes(self.trie):
            if 0 <= node.block_id < len(counts):
                counts[node.block_id] -= 1
        return (0, *counts)

    def _all_evicted(self) -> Any:
        """A copy of the trie (with its allocator) after ``evict`` of every block."""
        trie = copy.deepcopy(self.trie)
        trie.evict(self.num_blocks)
        return trie

    def view(self) -> PoolView:
        keys: list[frozenset[bytes]] = [frozenset()] * (self.num_blocks + 1)
        primary: list[bytes | None] = [None] * (self.num_blocks + 1)
        index = []
        for node, adapter, path in self._nodes(self.trie):
            key = self._key(adapter, path)
            block = spec_id(node.block_id)
            if 0 < block <= self.num_blocks:
                keys[block] = keys[block] | {key}
                primary[block] = key
            index.append((key, (block,)))
        allocator = self._all_evicted().allocator if self.caching else self.block_manager.allocator
        return PoolView(
            free_count=int(allocator.get_num_free_blocks()),
            ref_cnt=self._table_refs(),
            keys=tuple(keys),
            primary=tuple(primary),
            index=tuple(sorted(index)),
        )

    def structure_problems(self) -> list[str]:
        problems = allocator_problems(self.block_manager.allocator, self.num_blocks)
        counts = self._counts()
        owners: dict[int, int] = {}
        for node, _, path in self._nodes(self.trie):
            b = int(node.block_id)
            if not 0 <= b < self.num_blocks:
                problems.append(f"a trie node holds block id {b}, outside the pool")
                continue
            owners[b] = owners.get(b, 0) + 1
            if counts[b] < 1:
                problems.append(
                    f"invariant 'trie-block-held': block {spec_id(b)} is in the trie with "
                    f"ref count {counts[b]}"
                )
            if int(node.prefix_len) != len(path) or len(node.token_ids) != self.bs:
                problems.append(
                    f"invariant 'trie-node-depth': block {spec_id(b)}'s node ends at "
                    f"{node.prefix_len} but its path has {len(path)} tokens"
                )
        for b, n in sorted(owners.items()):
            if n > 1:
                problems.append(
                    f"invariant 'trie-block-once': block {spec_id(b)} is in {n} trie nodes"
                )
        if self.caching and not problems:
            problems += self._evictable_problems()
        return problems

    def _evictable_problems(self) -> list[str]:
        """``cached-blocks-evictable``: after ``evict`` of everything, every block still
        in the trie is held by a request (its own or a descendant's)."""
        trie = self._all_evicted()
        counts = [int(c) for c in trie.allocator._log_mem.ref_count]
        stuck = sorted(
            spec_id(node.block_id)
            for node, _, _ in self._nodes(trie)
            if not node.children and counts[node.block_id] == 1
        )
        if not stuck:
            return []
        return [
            f"invariant 'cached-blocks-evictable': blocks {stuck} are held by the trie alone "
            "and BlockTrie.evict does not free them"
        ]


class LmdeployManagerFactory:
    """Builds a :class:`LmdeployManagerTarget` per test case from one loaded release.

    ``prealloc`` is the tokens reserved beyond a sequence when it is scheduled (LMDeploy's
    ``prefill_interval``, 16 by default; 0 on a disaggregated prefill engine). The suite's
    pools have a handful of blocks of 2 to 6 tokens, where 16 would refuse every request:
    it runs with 1, the rule kept at the smallest size that still reserves."""

    checked_by_properties = True

    def __init__(
        self, release: LmdeployManagerRelease, name: str, prealloc: int = PREALLOC_TOKENS
    ) -> None:
        self.release = release
        self.name = name
        self.prealloc = prealloc

    @staticmethod
    def supported_setup(setup: RequestSetup) -> RequestSetup:
        return supported_setup(setup)

    def __call__(self, setup: RequestSetup, profile: Profile) -> LmdeployManagerTarget:
        return LmdeployManagerTarget(self.release, supported_setup(setup), self.name, self.prealloc)
