"""How each LMDeploy API generation admits, grows, preempts and ends a sequence.

The manager target (:mod:`.manager`) asks five things of LMDeploy; each generation answers
them with the release's own objects and calls, nothing of LMDeploy restated here:

- **a new sequence**: ``ARSequenceStrategy.make_sequence`` and
  ``SequenceLifecycle.add_sequence`` (0.18); ``SchedulerSession.add_sequence`` (0.16.0);
- **admission**: ``_PrefillScheduler.schedule`` with the sequence as the one waiting
  request (0.18); ``_PrefillAdmissionAttempt(Scheduler, ...).run()`` for it (0.16.0);
- **room to grow**: ``RecomputeEvictionHelper.try_make_capacity_for`` (0.18);
  ``RecomputeEvictionHelper.evict_for_seq`` (0.16.0);
- **preemption**: ``preempt_seqs``' state moves, then the recompute eviction's reclaim,
  ``release_paging_resources`` (0.18) or ``state.free()`` (0.16.0);
- **the end**: ``finish`` (or ``stop``), then ``SchedulerSession.end_sequence`` (0.18) or
  ``remove_sequence`` (0.16.0).

The admission is the scheduler's own transaction: the tentative ``BlockTrie.match``, room
made by the eviction helper, and either ``allocate`` with ``BlockTrie.allocate`` and the
match committed, or the match rolled back by LMDeploy's code and nothing scheduled. No
queued sequence is offered for reclaiming (the protocol's preempted requests hold no
blocks). Then the engine's dispatch: ``READY -> RUNNING``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from .manager_release import LmdeployManagerRelease

#: LMDeploy's default prefill token budget (``CacheConfig.max_prefill_token_num``), far
#: above any sequence the suite draws: no prefill is split into chunks.
PREFILL_TOKEN_BUDGET = 8192


class Scheduling(Protocol):
    """What the manager target asks of an LMDeploy generation."""

    block_manager: Any
    trie: Any

    def new_sequence(self, tokens: Any, adapter: str | None) -> Any:
        """A waiting sequence of ``tokens`` under ``adapter``."""
        ...

    def drop(self, seq: Any) -> None:
        """Forget a sequence that was never scheduled."""
        ...

    def schedule(self, seq: Any, prealloc: int) -> bool:
        """Admit the waiting ``seq`` (running afterwards) or leave it waiting, unchanged."""
        ...

    def make_room(self, seq: Any, prealloc: int) -> bool:
        """Free blocks until ``seq`` (a sequence or a view of one grown) fits."""
        ...

    def preempt(self, seq: Any) -> None:
        """A running sequence back to waiting, its blocks freed."""
        ...

    def finish(self, seq: Any, running: bool) -> None:
        """A sequence's end: its blocks freed."""
        ...


@dataclass(frozen=True)
class SchedulerLimits:
    """What the scheduler reads of LMDeploy's ``SchedulerConfig``: one sequence per prefill
    turn (the protocol admits one request at a time), recompute eviction."""

    max_batches: int = 1
    max_session_len: int = 1 << 20
    eviction_type: str = "recompute"
    prefill_interval: int = 16


@dataclass(frozen=True)
class CacheLimits:
    """What the scheduler and its builders read of LMDeploy's ``CacheConfig``: the pool's
    blocks, the prefix cache on or off, full attention only, no recurrent state."""

    block_size: int
    num_gpu_blocks: int
    enable_prefix_caching: bool
    max_batches: int = 1
    num_cpu_blocks: int = 0
    window_size: int = -1
    num_reserved_gpu_blocks: int = 0
    max_prefill_token_num: int = PREFILL_TOKEN_BUDGET
    num_state_caches: int | None = None
    prefix_cache_state_budget: int = 0
    states_shapes: list[tuple[int, ...]] = field(default_factory=list)


class PrefillSchedulerGeneration:
    """Releases with ``paging/prefill_scheduler.py`` (0.18): the owners built from their
    parts as ``Scheduler.__init__`` builds them, admission by ``_PrefillScheduler``."""

    def __init__(
        self, release: LmdeployManagerRelease, num_blocks: int, block_size: int, caching: bool
    ) -> None:
        m = release.module
        messages = m("pytorch.messages")
        self.messages = messages
        self.block_manager: Any = m(
            "pytorch.paging.block_manager.default_block_manager"
        ).DefaultBlockManager(num_blocks, 0)
        self.trie: Any = m("pytorch.paging.block_trie.trie").BlockTrie(
            allocator=self.block_manager.allocator, block_size=block_size, enabled=caching
        )
        self.strategy = m("pytorch.strategies.ar.sequence").ARSequenceStrategy()
        seq_meta = messages.SequenceMeta(
            block_size, strategy=self.strategy, enable_prefix_caching=caching
        )
        state_manager = m("pytorch.paging.state_manager").StateManager(num_states=None)
        self.lifecycle: Any = m("pytorch.paging.seq_states.states").SequenceLifecycle(
            seq_manager=messages.SequenceManager(seq_meta),
            block_manager=self.block_manager,
            state_manager=state_manager,
            state_checkpoints=self.trie.state_checkpoints,
            prefix_cache_enabled=caching,
            is_ssm=False,
            connector=None,
        )
        self.session: Any = messages.SchedulerSession(0, seq_meta, self.lifecycle)
        self.load_coordinator: Any = m("pytorch.paging.kv_load_coordinator").KVLoadCoordinator(
            lookup_enabled=False,
            connector=None,
            block_manager=self.block_manager,
            block_trie=self.trie,
            sessions={},
        )
        self.eviction: Any = m(
            "pytorch.paging.eviction_helper.recompute_eviction_helper"
        ).RecomputeEvictionHelper(
            block_manager=self.block_manager,
            block_trie=self.trie,
            state_manager=state_manager,
            load_coordinator=self.load_coordinator,
            is_ssm=False,
        )
        prefill = m("pytorch.paging.prefill_scheduler")
        self.prefill: Any = prefill._PrefillScheduler(
            SchedulerLimits(),
            CacheLimits(block_size, num_blocks, caching),
            is_ssm=False,
            block_manager=self.block_manager,
            block_trie=self.trie,
            state_manager=state_manager,
            eviction_helper=self.eviction,
            load_coordinator=self.load_coordinator,
        )
        self.turn_policy: Any = prefill._PrefillTurnPolicy.STANDARD

    def new_sequence(self, tokens: Any, adapter: str | None) -> Any:
        messages = self.messages
        seq = self.strategy.make_sequence(
            seq_id=self.lifecycle.new_sequence_id(),
            session=self.session,
            sampling_param=messages.SamplingParam(),
            adapter_name=adapter,
        )
        seq.update_token_ids(tokens, mode=messages.UpdateTokenMode.INPUTS)
        self.lifecycle.add_sequence(seq, messages.MessageStatus.WAITING)
        return seq

    def drop(self, seq: Any) -> None:
        self.lifecycle.remove_sequence(seq)

    def schedule(self, seq: Any, prealloc: int) -> bool:
        running = self.prefill.schedule(
            waiting=[seq],
            stopped=[],
            num_ready=0,
            num_running=0,
            turn_policy=self.turn_policy,
            prealloc_size=prealloc,
        )
        if seq not in running:
            return False
        seq.state.activate()  # READY -> RUNNING: the scheduler's activate_seqs
        return True

    def make_room(self, seq: Any, prealloc: int) -> bool:
        return bool(self.eviction.try_make_capacity_for(seq, [], prealloc))

    def preempt(self, seq: Any) -> None:
        seq.state.deactivate()  # RUNNING -> READY
        self.load_coordinator.release_tracking(seq)
        seq.state.evict()  # READY -> WAITING
        if self.trie.enabled:
            seq.prefix_cache.suppress_match_stats = True
        seq.state.release_paging_resources()

    def finish(self, seq: Any, running: bool) -> None:
        if running:
            seq.state.finish()  # RUNNING -> STOPPED
        else:
            seq.state.stop()
        self.load_coordinator.release_tracking(seq)
        self.session.end_sequence(seq)


class SchedulerGeneration:
    """Trees whose admission is in ``paging/scheduler.py`` (the 0.16.0 source): LMDeploy's
    ``Scheduler`` itself, built from its configs, with one session."""

    def __init__(
        self, release: LmdeployManagerRelease, num_blocks: int, block_size: int, caching: bool
    ) -> None:
        m = release.module
        self.release = release
        self.messages = m("pytorch.messages")
        self.scheduling = m("pytorch.paging.scheduler")
        seq_meta = self.messages.SequenceMeta(
            block_size, strategy=m("pytorch.strategies.ar.sequence").ARSequenceStrategy()
        )
        with release.importable():  # build_eviction_helper imports the helper's module
            self.scheduler: Any = self.scheduling.Scheduler(
                SchedulerLimits(), CacheLimits(block_size, num_blocks, caching), seq_meta
            )
        self.block_manager: Any = self.scheduler.block_manager
        self.trie: Any = self.scheduler.block_trie
        self.session: Any = self.scheduler.add_session(0)

    def new_sequence(self, tokens: Any, adapter: str | None) -> Any:
        with self.release.importable():  # add_sequence imports the sequence states
            return self.session.add_sequence(
                tokens, sampling_param=self.messages.SamplingParam(), adapter_name=adapter
            )

    def drop(self, seq: Any) -> None:
        self.session.remove_sequence(seq)

    def schedule(self, seq: Any, prealloc: int) -> bool:
        result = self.scheduling._PrefillAdmissionAttempt(
            self.scheduler,
            seq,
            evictable_waiting=[],
            prealloc_size=prealloc,
            token_count=0,
            has_admitted=False,
            allow_long_prefill=True,
        ).run()
        if not result.admitted:
            return False
        seq.state.activate()  # WAITING -> READY: the prefill turn's _to_running
        seq.state.activate()  # READY -> RUNNING: activate_seqs
        return True

    def make_room(self, seq: Any, prealloc: int) -> bool:
        return bool(self.scheduler.eviction_helper.evict_for_seq(seq, [], prealloc))

    def preempt(self, seq: Any) -> None:
        seq.state.deactivate()  # RUNNING -> READY
        seq.state.evict()  # READY -> WAITING
        if self.trie.enabled:
            seq.prefix_cache.suppress_match_stats = True
        seq.state.free()

    def finish(self, seq: Any, running: bool) -> None:
        if running:
            seq.state.finish()  # RUNNING -> STOPPED
        else:
            seq.state.stop()
        self.session.remove_sequence(seq)


def scheduling_for(
    release: LmdeployManagerRelease, num_blocks: int, block_size: int, caching: bool
) -> Scheduling:
    """The generation of ``release`` built over a pool of ``num_blocks`` blocks."""
    if release.generation == "prefill-scheduler":
        return PrefillSchedulerGeneration(release, num_blocks, block_size, caching)
    return SchedulerGeneration(release, num_blocks, block_size, caching)
