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
``step``               the batch planned ahead (else one planned now) dispatched:
                       ``activate_seqs``; a plan is a prefill turn,
                       ``schedule(is_prefill=True, prealloc_size)``, or when it admits
                       nothing and the inputs maker's running list is not empty, a
                       decode turn, ``schedule_running(running, 1, prealloc_size)``
``report``             the next batch planned ahead; then
                       ``ARSequenceStrategy.update_running`` with the sampled tokens and
                       stops; the rejected decode sequences back to waiting
                       (``preempt_seqs`` on 0.18, ``deactivate_seqs`` and
                       ``evict_seqs`` on 0.16.0); a finished request's client ends its
                       session (``end_session``)
``abort``              the client's cancel: ``stop_session``, then ``end_session``
=====================  ==================================================================

**The turn order.** Which turn comes next is the inputs maker's choice, not the
scheduler's. With chunked prefill on (``do_prefill_chunked``) the engine tries a prefill
turn whenever no sequence is ``READY`` (always, here: a planned batch is dispatched
before the next is planned) and falls back to decode when the prefill admits nothing
(``_ForwardInputsTask.run``): the driver takes that order. The inputs maker's running list
(``running_seqs``) is kept as it keeps it: at a prefill plan, the sequences still
``RUNNING``; at dispatch, those a prefill admitted added, or a decode's valid ones.

**Planning ahead.** The engine loop plans the next batch while the model runs the last
one, before that batch's output is in (``_main_loop_get_outputs``: the prefetch, then
the output): so a decode plan sees each sequence one token short, and keys in the trie
only blocks the passes already dispatched compute. The driver keeps that order, and
declares ``plans_ahead``: between ``report`` and the next ``step`` the block manager
already holds the next plan. A sequence that ended after its batch was planned is still
computed (the engine drops its output): the batch shows it when it prefills (its prompt
is written into blocks the trie may have keyed), and leaves it out when it decodes (its
one token lands past every block keyed by then, in a block freed at its end).

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

from ...machines.engine.driver import (
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


@dataclass(frozen=True)
class Planned:
    """A batch as the engine planned it: its sequences, their block tables then (the
    forward pass's ``block_offsets``, in the suite's ids) and whether it is a prefill."""

    seqs: list[Any]
    tables: list[tuple[int, ...]]
    prefill: bool
    #: Tokens each sequence computes (``seq_length``): its pending ones for a prefill,
    #: one for a decode.
    lengths: list[int]
    #: Where each sequence's computed tokens begin, for a prefill (its history then).
    starts: list[int]


class LmdeployDriver:
    """One LMDeploy ``Scheduler`` for one engine setup."""

    #: ``keys_within_pass``: ``BlockTrie.allocate`` attaches a full block when it is
    #: scheduled, and a later sequence of the same prefill turn may match it (the turn's
    #: one forward pass fills each layer's cache before it attends). ``swaps_in_cached``:
    #: ``BlockTrie.allocate`` replaces a sequence's block by the trie's block of the same
    #: tokens and frees its own.
    capabilities = frozenset(
        {
            "tables",
            "abort",
            "free_count",
            "ref_counts",
            "keys_within_pass",
            "swaps_in_cached",
            "plans_ahead",
            "drops_results",
        }
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
        #: The inputs maker's ``running_seqs`` and the decode turn's rejected sequences
        #: (``to_evict_seqs``); the batch dispatched and the one planned ahead.
        self.running: list[Any] = []
        self.to_evict: list[Any] = []
        self.dispatched: Planned | None = None
        self.next: Planned | None = None
        #: The requests whose last result the engine dropped (``drops_results``).
        self.dropped_ids: tuple[str, ...] = ()

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
        """The batch the engine dispatches: the one it planned ahead, else one planned
        now; then the next one planned ahead (``_main_loop_get_outputs``)."""
        planned = self.next if self.next is not None else self.plan()
        self.next = None
        preempted = self.preempted(self.released)
        self.released = set()
        if planned is None:
            self.dispatched = None
            return Batch(preempted=preempted)
        self.scheduler.activate_seqs(planned.seqs)
        self.dispatched = planned
        if planned.prefill:  # update_running_seqs
            self.running += [s for s in planned.seqs if s.sampling_param.max_new_tokens > 0]
        else:
            self.running = list(planned.seqs)
        shown = []
        for i, seq in enumerate(planned.seqs):
            rid, table = self.request_of(seq), (planned.tables[i],)
            if seq.status == self.messages.MessageStatus.RUNNING:
                start, count = int(seq.num_history_ids), int(seq.num_token_ids)
                shown.append(ScheduledRequest(rid, start, count, table))
            elif planned.prefill:  # ended since: the pass still computes its prompt
                shown.append(ScheduledRequest(rid, planned.starts[i], planned.lengths[i], table))
        return Batch(tuple(shown), preempted)

    def preempted(self, released: set[int]) -> tuple[str, ...]:
        """The live requests whose blocks the eviction helper reclaimed (``released``
        holds the sequence ids ``block_manager.free`` saw since the last batch)."""
        return tuple(rid for rid, (_, seq) in self.requests.items() if seq.seq_id in released)

    def plan(self) -> Planned | None:
        """One turn of the inputs maker (see the module docstring): a prefill, else a
        decode of its running list; ``None`` when neither has work."""
        running = self.messages.MessageStatus.RUNNING
        output = self.scheduler.schedule(is_prefill=True, prealloc_size=PREALLOC_TOKENS)
        seqs = list(output.running)
        if seqs:  # _build_prefill_inputs keeps the running list's valid sequences
            self.running = [seq for seq in self.running if seq.status == running]
            return self.planned(seqs, prefill=True)
        if not self.running:
            return None
        valid = self.scheduler.schedule_running(
            self.running, num_required_tokens=1, prealloc_size=PREALLOC_TOKENS
        )
        pairs = list(zip(self.running, valid, strict=True))
        self.to_evict = [seq for seq, ok in pairs if not ok]
        seqs = [seq for seq, ok in pairs if ok]
        return self.planned(seqs, prefill=False) if seqs else None

    def planned(self, seqs: list[Any], prefill: bool) -> Planned:
        tables = [tuple(int(b) + 1 for b in t) for t in self.scheduler.get_block_tables(seqs)]
        lengths = [int(s.num_token_ids) if prefill else 1 for s in seqs]
        return Planned(seqs, tables, prefill, lengths, [int(s.num_history_ids) for s in seqs])

    def request_of(self, seq: Any) -> str:
        return self.request_ids[int(seq.seq_id)]

    def report(self, results: Sequence[Sampled]) -> None:
        """The batch's output as the engine loop takes it in: after the next batch is
        planned, then the rejected decode sequences back to waiting, then each finished
        request's client ends its session."""
        dispatched, self.dispatched = self.dispatched, None
        self.dropped_ids = ()
        if dispatched is None:  # nothing ran: the engine waits, plans nothing ahead
            return
        self.next = self.plan()
        sampled = {r.request_id: r for r in results}
        running = self.messages.MessageStatus.RUNNING
        seqs = dispatched.seqs
        live = [self.request_of(s) for s in seqs if s.status == running]
        missing = [rid for rid in live if rid not in sampled]
        if missing:
            raise DriverError(f"LMDeploy samples every sequence of a batch; none for {missing}")
        # the plan just made preempted these: update_running skips them, no output is sent
        self.dropped_ids = tuple(rid for rid in sampled if rid not in live)
        # a sequence that ended before the batch ran is computed and its output dropped
        # (update_running skips it): any token stands for it
        got = [sampled.get(self.request_of(s), Sampled("", 0, False)) for s in seqs]
        np = self.np
        outputs = ModelOutputs(
            HostTensor(np.array([r.token for r in got], dtype=np.int64)),
            np.array([r.stop for r in got], dtype=bool),
        )
        shape = ForwardShape(np.array(dispatched.lengths), not dispatched.prefill)
        self.strategy.update_running(
            running=seqs,
            batched_outputs=outputs,
            model_inputs=shape if dispatched.prefill else None,
            delta=None if dispatched.prefill else shape,
        )
        release = getattr(self.scheduler, "release_completed_prefill_reservations", None)
        if release is not None:  # 0.18: once the output advanced the history
            release(seqs)
        self.preempt_rejected()
        for r in results:
            if r.stop and r.request_id not in self.dropped_ids:
                self.end(r.request_id)

    def dropped(self) -> tuple[str, ...]:
        return self.dropped_ids

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
