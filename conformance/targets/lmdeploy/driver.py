"""LMDeploy's ``Scheduler`` as an engine driver: every decision is the release's own.

The driver builds ``lmdeploy/pytorch/paging/scheduler.py``'s ``Scheduler`` through its own
constructor (its block manager, prefix trie, sequence lifecycle, eviction helper and
prefill scheduler are the ones it builds) and makes the calls LMDeploy's PyTorch engine
makes on it (``engine/engine.py``, ``engine/inputs_maker.py``, ``engine/engine_loop.py``
of 0.16.0 and 0.18.0):

=====================  ==================================================================
engine machine         LMDeploy
=====================  ==================================================================
``submit``             ``add_session`` and ``SchedulerSession.add_sequence`` with a
                       ``SamplingParam`` of the request's ``max_new_tokens``
``step``               a prefill turn: ``schedule(is_prefill=True, prealloc_size)``;
                       when it admits nothing and the inputs maker's running list is not
                       empty, a decode turn: ``schedule_running(running, 1,
                       prealloc_size)``; then ``activate_seqs`` (the dispatch)
``report``             ``ARSequenceStrategy.update_running`` with the sampled tokens and
                       stops; the rejected decode sequences back to waiting
                       (``preempt_seqs`` on 0.18, ``deactivate_seqs`` and
                       ``evict_seqs`` on 0.16.0); a finished request's client ends its
                       session (``end_session``)
``abort``              the client's cancel: ``stop_session``, then ``end_session``
=====================  ==================================================================

**The turn order.** Which turn comes next is the inputs maker's choice, not the
scheduler's. With chunked prefill on (``do_prefill_chunked``) the engine tries a prefill
turn whenever no sequence is ``READY`` (always, here: a batch is dispatched before the next
is planned) and falls back to decode when the prefill admits nothing
(``_ForwardInputsTask.run``): the driver takes that order. The inputs maker's running list
(``running_seqs``) is kept as it keeps it: after a prefill turn, the sequences still
``RUNNING`` and those the turn admitted; after a decode turn, the valid ones. The engine
prefetches the next batch before the last one's output is applied; the driver applies
each output before planning the next batch (one order the engine also takes when the
model is slower than the scheduler, never a decision of the scheduler's).

**Preemption.** LMDeploy's preemption does not free: a sequence the decode turn has no
room for goes back to ``WAITING`` with its blocks and history, and resumes where it was;
its blocks go only when the recompute eviction helper reclaims it for another sequence
(``release_paging_resources`` on 0.18, ``state.free()`` on 0.16.0, both ending in
``block_manager.free``). The driver reports a request preempted when that happens (its
blocks given back, its computed tokens lost), learnt by watching
``block_manager.free``: the block manager's own method, called unchanged, with the
sequence noted first.

**Setup.** Tokens reserved beyond a scheduled sequence are ``prefill_interval`` (16 by
default): the suite's caches have a handful of blocks of 2 or 4 tokens, where 16 would
refuse most requests, so ``prefill_interval`` is 1, the smallest that still reserves.
The prefill token budget (``max_prefill_token_num``) is at least the whole cache, so no
prompt is a long-context prefill (whose chunks the inputs maker, not the scheduler,
would cut). No null block: built with ``num_blocks - 1`` blocks, its block ``b`` is the
suite's ``b + 1``. Tables are the block manager's ``get_block_table`` (the physical ids
the model reads); ref counts are the allocator's per logical block, less the trie's own
reference per node, shown at the physical block it maps to. The free count is what the
pool could hand out: the free blocks and those ``BlockTrie.evict`` frees, on a copy of
the trie. LMDeploy has no cache salt, no flush and no KV events.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...engine_machine.driver import (
    Batch,
    DriverError,
    EngineSetup,
    Sampled,
    ScheduledRequest,
    Submission,
)
from .configs import CacheLimits, SchedulerLimits
from .manager_release import LmdeployManagerRelease
from .release import numpy_module

#: ``prefill_interval``, and so the tokens reserved beyond a scheduled sequence.
PREALLOC_TOKENS = 1


@dataclass(frozen=True)
class HostTensor:
    """The model's sampled tokens as ``update_running`` takes them (a torch tensor on
    the host; it calls ``numpy()``)."""

    values: Any

    def numpy(self) -> Any:
        return self.values


@dataclass(frozen=True)
class ModelOutputs:
    """What ``update_running`` reads of the model agent's ``BatchedOutputs``."""

    next_token_ids: HostTensor
    stopped: Any
    model_metas: None = None
    all_routed_experts: None = None


@dataclass(frozen=True)
class ForwardShape:
    """What ``update_running`` reads of the batch's ``ModelInputs`` (prefill) or
    ``ModelInputsDelta`` (decode)."""

    seq_length: Any
    is_decoding: bool


class LmdeployDriver:
    """One LMDeploy ``Scheduler`` for one engine setup."""

    #: ``keys_within_pass``: ``BlockTrie.allocate`` attaches a full block when it is
    #: scheduled, and a later sequence of the same prefill turn may match it (the turn's
    #: one forward pass fills each layer's cache before it attends). ``swaps_in_cached``:
    #: ``BlockTrie.allocate`` replaces a sequence's block by the trie's block of the same
    #: tokens and frees its own.
    capabilities = frozenset(
        {"tables", "abort", "free_count", "ref_counts", "keys_within_pass", "swaps_in_cached"}
    )

    def __init__(self, release: LmdeployManagerRelease, setup: EngineSetup, name: str) -> None:
        self.name = name
        self.release = release
        self.np = numpy_module("scheduler")
        self.messages: Any = release.module("pytorch.messages")
        self.new_generation = release.generation == "prefill-scheduler"
        room = (setup.num_blocks - 1) * setup.block_size
        strategy = release.module("pytorch.strategies.ar.sequence").ARSequenceStrategy()
        self.strategy: Any = strategy
        seq_meta = self.messages.SequenceMeta(setup.block_size, strategy=strategy)
        with release.importable():  # the builders import their classes when called
            self.scheduler: Any = release.module("pytorch.paging.scheduler").Scheduler(
                SchedulerLimits(setup.max_batch_size, prefill_interval=PREALLOC_TOKENS),
                CacheLimits(
                    setup.block_size,
                    setup.num_blocks - 1,
                    setup.enable_caching,
                    max_batches=setup.max_batch_size,
                    max_prefill_token_num=max(setup.max_batch_tokens, room),
                ),
                seq_meta,
            )
        self.num_blocks = setup.num_blocks - 1
        block_manager = self.scheduler.block_manager
        free = block_manager.free

        def watched_free(seq: Any) -> Any:
            self.released.add(int(seq.seq_id))
            return free(seq)

        block_manager.free = watched_free
        #: seq ids whose blocks ``block_manager.free`` gave back during this step.
        self.released: set[int] = set()
        #: request id -> (session id, sequence), while its client waits for it.
        self.requests: dict[str, tuple[int, Any]] = {}
        self.request_ids: dict[int, str] = {}
        #: The inputs maker's ``running_seqs``, the last batch and whether it prefilled,
        #: and the decode turn's rejected sequences (``to_evict_seqs``).
        self.running: list[Any] = []
        self.batch: list[Any] = []
        self.prefill = False
        self.to_evict: list[Any] = []

    # --- the engine's calls ---------------------------------------------------------------

    def submit(self, request: Submission) -> None:
        session_id = len(self.request_ids)
        session = self.scheduler.add_session(session_id)
        param = self.messages.SamplingParam(max_new_tokens=request.max_new_tokens)
        tokens = self.np.array(request.prompt, dtype=self.np.int64)
        with self.release.importable():  # 0.16.0 imports the sequence states here
            seq = session.add_sequence(tokens, sampling_param=param, adapter_name=None)
        self.requests[request.request_id] = (session_id, seq)
        self.request_ids[int(seq.seq_id)] = request.request_id

    def step(self) -> Batch:
        self.released = set()
        before = {rid: seq.num_blocks > 0 for rid, (_, seq) in self.requests.items()}
        output = self.scheduler.schedule(is_prefill=True, prealloc_size=PREALLOC_TOKENS)
        batch = list(output.running)
        self.prefill = bool(batch)
        running = self.messages.MessageStatus.RUNNING
        if batch:
            kept = [seq for seq in self.running if seq.status == running]
            self.running = kept + [s for s in batch if s.sampling_param.max_new_tokens > 0]
        elif self.running:
            valid = self.scheduler.schedule_running(
                self.running, num_required_tokens=1, prealloc_size=PREALLOC_TOKENS
            )
            batch = [seq for seq, ok in zip(self.running, valid, strict=True) if ok]
            self.to_evict = [seq for seq, ok in zip(self.running, valid, strict=True) if not ok]
            self.running = batch
        self.scheduler.activate_seqs(batch)
        self.batch = batch
        preempted = tuple(
            rid
            for rid, (_, seq) in self.requests.items()
            if before[rid] and int(seq.seq_id) in self.released
        )
        return Batch(tuple(self.planned(seq) for seq in batch), preempted)

    def request_of(self, seq: Any) -> str:
        return self.request_ids[int(seq.seq_id)]

    def planned(self, seq: Any) -> ScheduledRequest:
        table = self.scheduler.get_block_tables([seq])[0]
        return ScheduledRequest(
            self.request_of(seq),
            int(seq.num_history_ids),
            int(seq.num_token_ids),
            (tuple(int(b) + 1 for b in table),),
        )

    def report(self, results: Sequence[Sampled]) -> None:
        sampled = {r.request_id: r for r in results}
        missing = [self.request_of(s) for s in self.batch if self.request_of(s) not in sampled]
        if missing:
            raise DriverError(f"LMDeploy samples every sequence of a batch; none for {missing}")
        if self.batch:
            np = self.np
            got = [sampled[self.request_of(s)] for s in self.batch]
            outputs = ModelOutputs(
                HostTensor(np.array([r.token for r in got], dtype=np.int64)),
                np.array([r.stop for r in got], dtype=bool),
            )
            shape = ForwardShape(
                np.array([int(s.num_token_ids) for s in self.batch]), not self.prefill
            )
            self.strategy.update_running(
                running=self.batch,
                batched_outputs=outputs,
                model_inputs=shape if self.prefill else None,
                delta=None if self.prefill else shape,
            )
            release = getattr(self.scheduler, "release_completed_prefill_reservations", None)
            if release is not None:  # 0.18: after the output advanced the history
                release(self.batch)
        self.preempt_rejected()
        for r in results:
            if r.stop:
                self.end(r.request_id)
        self.batch = []

    def preempt_rejected(self) -> None:
        """The decode turn's rejected sequences back to waiting, as the engine loop does
        once the batch's output is in."""
        if not self.to_evict:
            return
        if self.new_generation:
            self.scheduler.preempt_seqs(self.to_evict)
        else:
            self.scheduler.deactivate_seqs(self.to_evict)
            self.scheduler.evict_seqs(self.to_evict)
        self.to_evict = []

    def end(self, request_id: str) -> None:
        """The client's end of its session (the stream's ``async_end``)."""
        session_id, _ = self.requests.pop(request_id)
        self.scheduler.end_session(session_id)

    def abort(self, request_id: str) -> None:
        session_id, _ = self.requests[request_id]
        self.scheduler.stop_session(session_id)
        self.end(request_id)

    # --- what it shows ------------------------------------------------------------------

    def free_count(self) -> int:
        trie = self.scheduler.block_trie
        if not trie.enabled:
            return int(self.scheduler.block_manager.get_num_free_gpu_blocks())
        evicted = copy.deepcopy(trie)
        evicted.evict(self.num_blocks)
        return int(evicted.allocator.get_phy_allocator("gpu").get_num_free_blocks())

    def ref_counts(self) -> tuple[int, ...]:
        allocator = self.scheduler.block_manager.allocator
        logical = self.np.arange(self.num_blocks)
        counts = [int(c) for c in allocator.get_ref_count(logical)]
        for node in trie_nodes(self.scheduler.block_trie):
            counts[int(node.block_id)] -= 1
        shown = [0] * (self.num_blocks + 1)
        physical = allocator.get_physical_blocks(logical)
        for block, count in enumerate(counts):
            if count:
                shown[int(physical[block]) + 1] = count
        return tuple(shown)


def trie_nodes(trie: Any) -> list[Any]:
    """Every node of the trie's roots' subtrees (the roots themselves hold no block)."""
    found: list[Any] = []
    stack = list(trie._roots.values())
    while stack:
        node = stack.pop()
        children = list(node.children.values())
        found += children
        stack += children
    return found
