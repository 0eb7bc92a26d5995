"""nano-vllm's ``Scheduler`` as an engine driver: every decision is the release's own.

nano-vllm's ``LLMEngine.step`` is ``seqs, is_prefill = scheduler.schedule()``, the model
runs ``seqs``, then ``scheduler.postprocess(seqs, token_ids)``; ``add_request`` is
``scheduler.add(Sequence(prompt, sampling_params))``. The driver makes exactly those calls
on the release's ``Scheduler``, ``Sequence`` and ``SamplingParams`` (its ``BlockManager``
inside the scheduler allocates, hits, appends, preempts and frees), and reads what they
leave: the scheduled sequences' block tables and cached-token counts, the sequences its
scheduler set back to waiting (preempted), the block manager's free list and ref counts.

The model's side, as nano-vllm's model runner plays it: a prefill computes a sequence's
tokens from ``num_cached_tokens`` to its end, a decode step its last token; every
scheduled sequence samples one token (nano-vllm never chunks a prompt). A stop the suite's
model makes before a request's last allowed token is the model sampling the end-of-sequence
token (:data:`EOS`, outside the suite's vocabulary); the last allowed token stops it by the
sequence's own ``max_tokens``.

**Setup.** The scheduler reads five fields of nano-vllm's ``Config`` (whose own
constructor loads a model folder with transformers): ``max_num_seqs``,
``max_num_batched_tokens``, ``eos``, ``num_kvcache_blocks``, ``kvcache_block_size``.
nano-vllm has no null block, so it gets ``num_blocks - 1`` blocks and its block ``b`` is
the suite's ``b + 1``. Its ``Config`` requires the token budget to cover ``max_model_len``
(a prompt is never split), so the budget is at least the whole cache, the longest
sequence the suite draws. It has no cache salt, no abort, no way to drop its cache and no
KV events: none of them is declared.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from ...machines.engine.driver import Batch, EngineSetup, Sampled, ScheduledRequest, Submission
from .release import NanoVllmRelease

#: The model's end-of-sequence token: none of the suite's tokens (its vocabulary is 1-9).
EOS = 0


class NanoVllmDriver:
    """One nano-vllm ``Scheduler`` (with its ``BlockManager``) for one engine setup."""

    #: ``keys_within_pass``: its ``allocate`` keys a full block when it schedules it, and
    #: a request later in the same prefill batch may hit it (nano-vllm's attention stores
    #: a layer's KV before it attends, so the hit reads what that pass wrote).
    capabilities = frozenset({"tables", "free_count", "ref_counts", "keys_within_pass"})

    def __init__(self, release: NanoVllmRelease, setup: EngineSetup, name: str) -> None:
        self.name = name
        self.release = release
        room = (setup.num_blocks - 1) * setup.block_size
        config = SimpleNamespace(
            max_num_seqs=setup.max_batch_size,
            max_num_batched_tokens=max(setup.max_batch_tokens, room),
            eos=EOS,
            num_kvcache_blocks=setup.num_blocks - 1,
            kvcache_block_size=setup.block_size,
        )
        self.scheduler: Any = release.scheduler.Scheduler(config)
        base = release.sequence.Sequence
        self.Sequence = type("Sequence", (base,), {"block_size": setup.block_size})
        #: request id -> its sequence, while the client waits for it.
        self.sequences: dict[str, Any] = {}
        #: every sequence's ``seq_id`` (its own, never reused) -> its request id: a batch
        #: naming a finished sequence is shown as naming its request.
        self.request_ids: dict[int, str] = {}
        #: The last batch's sequences, in the scheduler's order.
        self.batch: list[Any] = []

    def submit(self, request: Submission) -> None:
        params = self.release.sampling_params.SamplingParams(max_tokens=request.max_new_tokens)
        seq = self.Sequence(list(request.prompt), params)
        self.sequences[request.request_id] = seq
        self.request_ids[seq.seq_id] = request.request_id
        self.scheduler.add(seq)

    def step(self) -> Batch:
        if self.scheduler.is_finished():  # LLMEngine steps only while something is left
            self.batch = []
            return Batch()
        running = [rid for rid, seq in self.sequences.items() if seq in self.scheduler.running]
        seqs, is_prefill = self.scheduler.schedule()
        self.batch = list(seqs)
        scheduled = []
        for seq in seqs:
            start = int(seq.num_cached_tokens) if is_prefill else len(seq) - 1
            table = tuple(int(b) + 1 for b in seq.block_table)
            rid = self.request_ids[seq.seq_id]
            scheduled.append(ScheduledRequest(rid, start, len(seq) - start, (table,)))
        preempted = tuple(rid for rid in running if self.sequences[rid] in self.scheduler.waiting)
        return Batch(tuple(scheduled), preempted)

    def report(self, results: Sequence[Sampled]) -> None:
        sampled = {r.request_id: r for r in results}
        seqs, tokens = [], []
        for seq in self.batch:
            got = sampled.get(self.request_ids[seq.seq_id])
            if got is None:
                continue
            last = seq.num_completion_tokens + 1 >= seq.max_tokens
            seqs.append(seq)
            tokens.append(EOS if got.stop and not last else got.token)
        self.batch = []
        self.scheduler.postprocess(seqs, tokens)
        for rid in [r for r, seq in self.sequences.items() if seq.is_finished]:
            del self.sequences[rid]

    def free_count(self) -> int:
        return len(self.scheduler.block_manager.free_block_ids)

    def ref_counts(self) -> tuple[int, ...]:
        blocks = self.scheduler.block_manager.blocks
        return (0, *(int(block.ref_count) for block in blocks))
