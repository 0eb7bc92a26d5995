"""vLLM's v1 ``Scheduler`` (with its ``KVCacheManager``) as an engine driver: every
decision is the release's own.

vLLM's engine core does ``scheduler.add_request(Request.from_engine_core_request(...))``
for an arrival, ``output = scheduler.schedule()``, runs the model on ``output``, then
``scheduler.update_from_output(output, model_runner_output)``; an abort is
``scheduler.finish_requests(ids, FINISHED_ABORTED)``. The driver makes exactly those calls
and reads what they leave through vLLM's own accessors: the block tables
(``KVCacheManager.get_block_ids``), the hit a new or resumed request was granted (its
``num_computed_tokens`` in the plan), the preempted ids, the copies and zeroed blocks the
plan orders, the pool's free count and each block's ``ref_cnt``.

**Setup.** The scheduler is built as vLLM's own scheduler unit tests build it, through
vLLM's public config classes: a ``ModelConfig`` of a one-layer model folder the suite
writes (no weights, no tokenizer), a ``SchedulerConfig`` with the setup's batch budget, a
``CacheConfig`` with its block size and block count, and a ``KVCacheConfig`` of one
full-attention group. These classes import torch and transformers, so the scheduler runs
from an installed vLLM (:mod:`.scheduler_loading`), never from the isolated files.

A stop the suite's model makes before a request's last allowed token is the model
sampling a stop token (:data:`STOP`, outside the suite's vocabulary); the last allowed
token stops it by its own ``max_tokens``. Block 0 is vLLM's null block, as in the pool's
vocabulary.

**Events.** ``update_from_output`` takes the manager's KV events and publishes them as one
batch through the scheduler's ``kv_event_publisher`` (a ZMQ publisher in production, whose
subscriber is the router). The driver puts a receiver there (:class:`.Received`, vLLM's
publisher interface: ``publish``, ``shutdown``) and hands the batches over as the spec's
events: the stream is what vLLM publishes, when it publishes it (an abort's or a flush's
events with the next step's batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvpool.spec.events import AllBlocksCleared, BlockRemoved, BlockStored, Event

from ...machines.engine.driver import Batch, EngineSetup, Sampled, ScheduledRequest, Submission
from .scheduler_loading import Received

#: The model's stop token: none of the suite's tokens (its vocabulary is 1-9).
STOP = 0


class VllmSchedulerDriver:
    """One vLLM ``Scheduler`` for one engine setup (``vllm`` is the release's modules)."""

    #: ``keys_within_pass``: ``KVCacheManager.allocate_slots`` caches the full blocks of
    #: the tokens it schedules (``num_tokens_to_cache`` counts this step's new tokens), so
    #: a request later in the same batch may hit a block the batch's pass writes.
    capabilities = frozenset(
        {"tables", "abort", "free_count", "ref_counts", "flush", "salts", "keys_within_pass",
         "events"}
    )  # fmt: skip

    def __init__(self, vllm: Any, setup: EngineSetup, name: str) -> None:
        self.name, self.vllm = name, vllm
        self.scheduler, self.hasher = vllm.scheduler(setup), vllm.block_hasher(setup.block_size)
        self.output: Any = None
        self.received = self.scheduler.kv_event_publisher = Received()

    def submit(self, request: Submission) -> None:
        params = self.vllm.SamplingParams(max_tokens=request.max_new_tokens, stop_token_ids=[STOP])
        self.scheduler.add_request(self.vllm.request(request, params, self.hasher))

    def step(self) -> Batch:
        self.output = out = self.scheduler.schedule()
        manager, cached = self.scheduler.kv_cache_manager, out.scheduled_cached_reqs
        starts = {new.req_id: new.num_computed_tokens for new in out.scheduled_new_reqs}
        starts.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
        runs = tuple(
            ScheduledRequest(rid, starts[rid], n, tuple(map(tuple, manager.get_block_ids(rid))))
            for rid, n in out.num_scheduled_tokens.items()
        )
        copies = tuple((c.src_block_id, c.dst_block_id) for c in out.kv_cache_block_copies or ())
        preempted = tuple(sorted(out.preempted_req_ids or ()))
        return Batch(runs, preempted, copies, tuple(out.new_block_ids_to_zero or ()))

    def report(self, results: Sequence[Sampled]) -> None:
        ids, sampled = list(self.output.num_scheduled_tokens), {r.request_id: r for r in results}
        tokens = [[self.token(sampled[rid])] if rid in sampled else [] for rid in ids]
        self.scheduler.update_from_output(self.output, self.vllm.model_output(ids, tokens))

    def token(self, sampled: Sampled) -> int:
        """The token the model samples: :data:`STOP` for a stop before the last allowed."""
        request = self.scheduler.requests[sampled.request_id]
        last = request.num_output_tokens + 1 >= request.max_tokens
        return STOP if sampled.stop and not last else sampled.token

    def abort(self, request_id: str) -> None:
        self.scheduler.finish_requests(request_id, self.vllm.RequestStatus.FINISHED_ABORTED)

    def free_count(self) -> int:
        return int(self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks())

    def ref_counts(self) -> tuple[int, ...]:
        return tuple(int(b.ref_cnt) for b in self.scheduler.kv_cache_manager.block_pool.blocks)

    def flush(self) -> bool:
        return bool(self.scheduler.reset_prefix_cache())

    def drain_events(self) -> list[Event]:
        batches, self.received.batches = self.received.batches, []
        return [s for batch in batches for e in batch.events for s in spec_events(e)]


def spec_hash(value: bytes | int) -> bytes:
    """A published block hash as the spec's events name hashes (32 bytes): vLLM publishes
    the hash's bytes, or its low 64 bits as an integer."""
    return value if isinstance(value, bytes) else int(value).to_bytes(32, "big")


def spec_events(event: Any) -> list[Event]:
    """One of vLLM's published events in the spec's vocabulary."""
    group = int(getattr(event, "group_idx", None) or 0)
    if type(event).__name__ == "BlockRemoved":
        return [BlockRemoved(spec_hash(h), group) for h in event.block_hashes]
    if type(event).__name__ == "AllBlocksCleared":
        return [AllBlocksCleared()]
    parent = event.parent_block_hash
    hashes = tuple(spec_hash(h) for h in event.block_hashes)
    stored = BlockStored(hashes, None if parent is None else spec_hash(parent), group,
                         int(event.block_size), len(event.token_ids))  # fmt: skip
    return [stored]
