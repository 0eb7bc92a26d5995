"""How the manager target admits, grows, preempts and ends one LMDeploy sequence.

The manager target (:mod:`.manager`) asks five things of LMDeploy, one request at a time.
Every owner it touches is built by the release's own ``Scheduler`` constructor
(``paging/scheduler.py``: its block manager, prefix trie, sequence lifecycle, eviction
helper, prefill scheduler), and each answer is a call on them:

- **a new sequence**: ``SchedulerSession.add_sequence`` on the scheduler's one session;
- **admission**: a prefill admission with the sequence as the one candidate:
  ``_PrefillScheduler.schedule(waiting=[seq], ...)`` (0.18; it activates the sequence to
  ``READY``), ``_PrefillAdmissionAttempt(Scheduler, seq, ...).run()`` (0.16.0, whose
  prefill turn then activates it); then the engine's dispatch, ``activate_seqs``;
- **room to grow**: the eviction helper's ``try_make_capacity_for`` (0.18),
  ``evict_for_seq`` (0.16.0), with no sequence offered for reclaiming (the protocol's
  preempted requests hold no blocks);
- **preemption**: the engine's ``preempt_seqs`` (0.18) or ``deactivate_seqs`` and
  ``evict_seqs`` (0.16.0), then the recompute eviction's reclaim of that one sequence,
  ``release_paging_resources`` (0.18) or ``state.free()`` (0.16.0);
- **the end**: ``finish`` (or ``stop``), then the session's ``end_sequence`` (0.18) or
  ``remove_sequence`` (0.16.0), as ``Scheduler.end_session`` does for each sequence.

The requests machine admits one request at a time, so the admission is called for one
sequence rather than the scheduler's whole waiting queue (``--machine engine`` drives the
``Scheduler``'s own ``schedule``: :mod:`.driver`).
"""

from __future__ import annotations

from typing import Any

from .configs import CacheLimits, SchedulerLimits
from .manager_release import LmdeployManagerRelease


class SchedulerCalls:
    """One LMDeploy ``Scheduler`` (of either API generation) and the calls above."""

    def __init__(
        self, release: LmdeployManagerRelease, num_blocks: int, block_size: int, caching: bool
    ) -> None:
        m = release.module
        self.release = release
        self.messages: Any = m("pytorch.messages")
        self.newer = release.generation == "prefill-scheduler"
        self.scheduling: Any = m("pytorch.paging.scheduler")
        strategy = m("pytorch.strategies.ar.sequence").ARSequenceStrategy()
        seq_meta = self.messages.SequenceMeta(block_size, strategy=strategy)
        with release.importable():  # the builders import their classes when called
            self.scheduler: Any = self.scheduling.Scheduler(
                SchedulerLimits(), CacheLimits(block_size, num_blocks, caching), seq_meta
            )
        self.block_manager: Any = self.scheduler.block_manager
        self.trie: Any = self.scheduler.block_trie
        self.session: Any = self.scheduler.add_session(0)

    def new_sequence(self, tokens: Any, adapter: str | None) -> Any:
        """A waiting sequence of ``tokens`` under ``adapter``."""
        with self.release.importable():  # 0.16.0 imports the sequence states here
            return self.session.add_sequence(
                tokens, sampling_param=self.messages.SamplingParam(), adapter_name=adapter
            )

    def drop(self, seq: Any) -> None:
        """Forget a sequence that was never scheduled."""
        self.session.remove_sequence(seq)

    def schedule(self, seq: Any, prealloc: int) -> bool:
        """Admit the waiting ``seq`` (running afterwards) or leave it waiting, unchanged."""
        if self.newer:
            prefill = self.scheduler._prefill_scheduler
            running = prefill.schedule(
                waiting=[seq],
                stopped=[],
                num_ready=0,
                num_running=0,
                turn_policy=self.scheduling._PrefillTurnPolicy.from_flags(True, False),
                prealloc_size=prealloc,
            )
            admitted = seq in running
        else:
            admitted = (
                self.scheduling._PrefillAdmissionAttempt(
                    self.scheduler,
                    seq,
                    evictable_waiting=[],
                    prealloc_size=prealloc,
                    token_count=0,
                    has_admitted=False,
                    allow_long_prefill=True,
                )
                .run()
                .admitted
            )
            if admitted:
                seq.state.activate()  # the prefill turn's _to_running: WAITING -> READY
        if admitted:
            self.scheduler.activate_seqs([seq])
        return bool(admitted)

    def make_room(self, seq: Any, prealloc: int) -> bool:
        """Free blocks until ``seq`` (a sequence or a view of one grown) fits."""
        helper = self.scheduler.eviction_helper
        if self.newer:
            return bool(helper.try_make_capacity_for(seq, [], prealloc))
        return bool(helper.evict_for_seq(seq, [], prealloc))

    def preempt(self, seq: Any) -> None:
        """A running sequence back to waiting, then reclaimed: its blocks freed."""
        if self.newer:
            self.scheduler.preempt_seqs([seq])
        else:
            self.scheduler.deactivate_seqs([seq])
            self.scheduler.evict_seqs([seq])
        if self.trie.enabled:  # as the recompute eviction helper reclaims a sequence
            seq.prefix_cache.suppress_match_stats = True
        if self.newer:
            seq.state.release_paging_resources()
        else:
            seq.state.free()

    def finish(self, seq: Any, running: bool) -> None:
        """A sequence's end: its blocks freed."""
        if running:
            seq.state.finish()  # RUNNING -> STOPPED
        else:
            seq.state.stop()
        if self.newer:
            self.session.end_sequence(seq)
        else:
            self.session.remove_sequence(seq)
