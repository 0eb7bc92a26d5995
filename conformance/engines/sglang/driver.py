"""SGLang 0.5's scheduler as an engine driver: every decision is the release's own.

SGLang's ``Scheduler.event_loop_normal`` plans with
``get_next_batch_to_run(running_batch=..., last_batch=...)``, keeps the plan's running
batch, has the model run the batch and hands its result to ``process_batch_result``; a
request arrives as a ``Req`` put in the waiting queue by ``_add_request_to_queue``. The
driver makes exactly those calls, on the release's ``Scheduler`` methods, and reads what
they leave: each scheduled ``Req``'s row of the ``ReqToTokenPool`` (its pages), its
``prefix_len`` (the hit the tree granted), the requests retraction put back in the waiting
queue, the allocator's free pages and the tree's evictable ones. Inside those methods run
the release's ``PrefillAdder`` (its budget, ``add_one_req``), ``SchedulePolicy``
(``calc_priority``), ``Req.init_next_round_input`` and the finish checks,
``ScheduleBatch.prepare_for_extend`` / ``prepare_for_decode`` / ``check_decode_mem`` /
``retract_decode`` / ``filter_batch`` / ``merge_batch``, the batch result processor
(``process_batch_result_prefill`` / ``_decode``: ``checkpoint_kv_cache`` after a prefill,
``release_kv_cache`` at a finish) and the ``RadixCache`` with its paged allocator.

**What is not SGLang's.** ``Scheduler.__init__`` starts a GPU model worker, IPC sockets
and a tokenizer, so the scheduler object is made without it and given the attributes its
methods read (:func:`_wire`): the cache objects built as ``init_memory_pools`` builds
them for a plain attention model, settings from the release's declared defaults
(:mod:`.settings`) and the setup, and the release's own ``init_schedule_policy`` run on
it. The rest are named stand-ins for what is not the scheduler's: the model worker (the
suite plays the model: no attention backend hint, so the adder's default tile of 64), its
sampler tensors, the model config (a vocabulary, no reasoning tokens), the output streamer
(the suite reads the requests itself), metrics, load publishing and health checks (no-op),
no grammars, beams, LoRA or data-parallel adapters. An attribute the methods read that is
not given raises :class:`NotWired`, a loading error naming it, never a finding.

The model's side: the result is the release's ``GenerationBatchResult`` with one token per
request of the batch (a middle prompt chunk's is ignored by SGLang, as on a GPU). A stop
the suite's model makes before a request's last allowed token is the end-of-sequence token
(:data:`EOS`, outside the suite's vocabulary); the last allowed token stops it by its own
``max_new_tokens``.

**Setup.** The page is the suite's block (2 or 4 tokens: SGLang's paged allocator wants a
power of two); SGLang's page ``p`` is the suite's block ``p`` (its page 0 is never handed
out, as the suite's null block). Chunked prefill and the prefill budget are the setup's
batch tokens, the running requests its batch size. Salts are the requests'
``cache_salt``. KV events are the release's recorder's (the machine turns them on for a
driver declaring them), and the chain they should name is read off the tree under the
recorder's own page hashes (``event_parents``). No abort is declared (``abort_request``
takes the tokenizer's ``AbortReq`` over IPC).
"""

from __future__ import annotations

import sys
from array import array
from collections import deque
from types import SimpleNamespace
from typing import Any

from kvpool.spec.events import Event

from ...machines.engine.driver import Batch, EngineSetup, EventParents, Submission
from .scheduler_reading import EOS, NotWired, ReadsScheduler, strict, unwired
from .scheduler_release import SglangScheduler05
from .settings import Bag
from .tree_view import event_parents, require_native_hash, spec_events

#: ``ReqToTokenPool``'s columns: far above the longest sequence the suite draws.
MAX_CONTEXT = 1024


class ModelConfig:
    """The model as the scheduler reads it: a vocabulary, no encoder, no reasoning tokens."""

    vocab_size = 16
    is_encoder_decoder = False
    is_multimodal = False
    self_opened_think_start_ids = None
    think_end_ids = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return strict(f"model_config.{name}")


class Outbox:
    """The output streamer: the suite reads finished and sampled requests itself."""

    def stream_output(self, *_: object, **__: object) -> None:
        return None


class NoMetrics:
    """Metrics and logs: counted nowhere."""

    num_generated_tokens = 0
    forward_ct_decode = 0
    enable_metrics = False
    is_stats_logging_rank = False
    num_retracted_reqs = 0

    def report_prefill_stats(self, *_: object, **__: object) -> None:
        return None

    def report_decode_stats(self, *_: object, **__: object) -> None:
        return None

    def log_batch_result_stats(self, *_: object, **__: object) -> None:
        return None

    def update_device_timer(self, *_: object, **__: object) -> None:
        return None

    def reset_metrics(self) -> None:
        return None


class NoGrammars:
    """No request asks for a grammar."""

    grammar_queue: tuple[object, ...] = ()

    def has_waiting_grammars(self) -> bool:
        return False

    def clear(self) -> None:
        return None


class NoBeams:
    """No request asks for beam search."""

    def pending_member_rows(self, *_: object) -> int:
        return 0


class OneRank:
    """One rank, no data parallelism: a batch is what the scheduler planned."""

    def maybe_prepare_mlp_sync_batch(self, batch: Any, need_sync: bool = False) -> Any:
        return batch

    def maybe_convert_decode_to_extend(self, batch: Any) -> Any:
        return batch


class NoNgramEmbedding:
    """The model has no n-gram embedding table."""

    def prepare_for_forward(self, batch: Any, chunked_req: Any = None) -> Any:
        return batch


def _no(*_: object, **__: object) -> None:
    return None


class SglangSchedulerDriver(ReadsScheduler):
    """One SGLang ``Scheduler`` (its methods, on its own cache objects) for one setup."""

    #: ``swaps_in_cached``: ``checkpoint_kv_cache`` points a request at the tree's page
    #: where another request cached the same prefix first (and frees its own copy).
    capabilities = frozenset(
        {"tables", "free_count", "flush", "salts", "swaps_in_cached", "events", "event_parents"}
    )

    def __init__(self, release: SglangScheduler05, setup: EngineSetup, name: str) -> None:
        self.name = name
        self.release = release
        self.page = setup.block_size
        self.settings = _settings(release, setup)
        with release.active(self.settings):
            self.scheduler = _wire(release, setup, self.settings)
        #: request id -> its ``Req`` while the client waits for it.
        self.reqs: dict[str, Any] = {}
        #: The batch planned last, until its result is reported.
        self.batch: Any = None

    # --- the boundary -----------------------------------------------------------------

    def submit(self, request: Submission) -> None:
        release = self.release
        with release.active(self.settings):
            params = release.sampling_params.SamplingParams(max_new_tokens=request.max_new_tokens)
            params.normalize(None)  # the tokenizer manager's call (no stop strings)
            req = release.schedule_batch.Req(
                request.request_id,
                "",
                array("q", request.prompt),
                params,
                eos_token_ids={EOS},
                vocab_size=ModelConfig.vocab_size,
                cache_salt=request.salt,
            )
            release.scheduler.Scheduler._add_request_to_queue(self.scheduler, req)
        self.reqs[request.request_id] = req

    def step(self) -> Batch:
        s, release = self.scheduler, self.release
        admitted = self._admitted()
        with release.active(self.settings):
            plan = release.scheduler.Scheduler.get_next_batch_to_run(
                s, running_batch=s.running_batch, last_batch=s.last_batch
            )
        s.running_batch = plan.running_batch
        batch = self.batch = plan.batch_to_run
        if batch is None:
            s.last_batch = None
        return self._planned(batch, admitted)

    def _ran(self, batch: Any, tokens: list[int]) -> None:
        """The model's tokens as the release's ``GenerationBatchResult``, processed by
        ``process_batch_result``."""
        import torch

        s, release = self.scheduler, self.release
        utils = release.modules["sglang.srt.managers.utils"]
        result = utils.GenerationBatchResult(next_token_ids=torch.tensor(tokens))
        with release.active(self.settings):
            release.scheduler.Scheduler.process_batch_result(s, batch, result)

    def drain_events(self) -> list[Event]:
        """The release's ``KVCacheEventRecorder``'s events since the last call (one
        ``BlockStored`` per page, coalesced along a chain; hashed by the release's own
        ``hash_binding.cpp``), as the spec's events."""
        with self.release.active(self.settings):
            taken = self.scheduler.tree_cache.take_events()
        return list(spec_events(taken, "BlockStored", "BlockRemoved"))

    def event_parents(self) -> EventParents:
        """The chain the tree holds: each page under the hash the release's recorder
        publishes it by, and the page before it on its path (:func:`.tree_view.event_parents`:
        a node's first page follows its parent node's last)."""
        with self.release.active(self.settings):
            parents = event_parents(self.release.modules, self.scheduler.tree_cache)
        return parents or {}

    def flush(self) -> bool:
        """``Scheduler.flush_cache`` (without emptying the device allocator's cache), as
        the server's loop reaches it: a flush request is read at the top of a loop pass,
        and with no request left the loop has passed idly since the last batch (its
        ``get_next_batch_to_run`` filtered the finished requests out of ``last_batch``),
        so that pass is made first; it plans nothing when nothing waits."""
        if self.scheduler.last_batch is not None and self.step().scheduled:
            raise NotWired("SGLang planned a batch in the idle pass before a flush")
        with self.release.active(self.settings):
            flushed = self.release.scheduler.Scheduler.flush_cache(
                self.scheduler, empty_cache=False
            )
        return bool(flushed)

    # --- reading what the scheduler left --------------------------------------------------

    def _extended(self, req: Any) -> tuple[int, int]:
        return int(req.prefix_len), int(req.extend_end)

    def _row(self, req: Any) -> int:
        return int(req.kv.req_pool_idx)


def _settings(release: SglangScheduler05, setup: EngineSetup) -> dict[str, Bag]:
    """The release's declared defaults, with what the setup decides and what launch
    resolution would for a plain attention model on one rank."""
    settings = release.settings()
    settings["schedule"].give(
        chunked_prefill_size=setup.max_batch_tokens,
        max_running_requests=setup.max_batch_size,
        max_prefill_tokens=setup.max_batch_tokens,
        page_size=setup.block_size,
    )
    settings["memory"].give(disable_radix_cache=not setup.enable_caching)
    # resolved at launch: no hybrid (mamba) layers; one pipeline stage holding every request
    settings["exec"].sub("mamba").give(
        enable_mamba_extra_buffer=False, enable_mamba_extra_buffer_lazy=False
    )
    settings["parallel"].give(pp_max_micro_batch_size=setup.max_batch_size)
    return settings


def _wire(release: SglangScheduler05, setup: EngineSetup, settings: dict[str, Bag]) -> Any:
    """A ``Scheduler`` made without ``__init__``, with what its methods read (see the
    module docstring); the release's ``init_schedule_policy`` runs on it."""
    import torch

    modules = release.modules
    page, slots = setup.block_size, (setup.num_blocks - 1) * setup.block_size
    allocators = modules["sglang.srt.mem_cache.allocator"]
    allocator = allocators.PagedTokenToKVPoolAllocator(
        slots, page, torch.float16, "cpu", None, False
    )
    pool_class = release.defined["srt/mem_cache/memory_pool.py"]["ReqToTokenPool"]
    assert isinstance(pool_class, type)
    rows = setup.max_batch_size + 1
    req_to_token_pool = pool_class(rows, MAX_CONTEXT, "cpu", False)
    params = modules["sglang.srt.mem_cache.cache_init_params"].CacheInitParams(
        disable=not setup.enable_caching,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator,
        page_size=page,
        enable_kv_cache_events=setup.enable_kv_cache_events,
    )
    tree_cache = modules["sglang.srt.mem_cache.radix_cache"].RadixCache(params)
    if setup.enable_kv_cache_events:
        require_native_hash(release.modules, release.label)
    base = release.scheduler.Scheduler
    s = unwired(base)
    schedule = settings["schedule"]
    modes: Any = release.defined["srt/disaggregation/utils.py"]["DisaggregationMode"]
    spec_info = modules["sglang.srt.speculative.spec_info"]
    s.__dict__.update(
        # init_memory_pools: the cache objects
        tree_cache=tree_cache,
        token_to_kv_pool_allocator=allocator,
        req_to_token_pool=req_to_token_pool,
        page_size=page,
        # the server settings it copies onto itself (at their declared defaults)
        schedule_policy=schedule.schedule_policy,
        enable_priority_scheduling=schedule.enable_priority_scheduling,
        schedule_low_priority_values_first=schedule.schedule_low_priority_values_first,
        priority_scheduling_preemption_threshold=(
            schedule.priority_scheduling_preemption_threshold
        ),
        abort_on_priority_when_disabled=schedule.abort_on_priority_when_disabled,
        max_queued_requests=schedule.max_queued_requests,
        max_running_requests=setup.max_batch_size,
        max_prefill_tokens=setup.max_batch_tokens,
        # init_chunked_prefill
        chunked_prefill_size=setup.max_batch_tokens,
        prefill_decode_interval=schedule.prefill_decode_interval or 0,
        _prefill_decode_interval_remaining=0,
        prefill_decode_interval_min_bs=schedule.prefill_decode_interval_min_bs,
        chunked_req=None,
        _pending_chunked_abort_req=None,
        is_mixed_chunk=False,
        dynamic_chunk_sizer=None,
        # init_running_status
        waiting_queue=[],
        running_batch=release.schedule_batch.ScheduleBatch(reqs=[], batch_is_full=False),
        last_batch=None,
        cur_batch_for_debug=None,
        result_queue=deque(),
        enable_skip_finishing_decode=False,
        forward_ct=0,
        _engine_paused=False,
        processed_tokens_counter=0,
        # one rank, a plain attention model, no optional features
        disaggregation_mode=modes.NULL,
        spec_algorithm=spec_info.SpeculativeAlgorithm.from_string(
            settings["spec"].speculative_algorithm
        ),
        dllm_config=None,
        is_generation=True,
        enable_overlap=False,
        enable_hisparse=False,
        hisparse_coordinator=None,
        enable_hierarchical_cache=False,
        enable_hicache_storage=False,
        enable_lmcache=False,
        enable_unified_cache_external_linker=False,
        enable_lora=False,
        enable_fpm=False,
        is_hybrid_swa=False,
        require_mlp_sync=False,
        min_free_slots_delayer=None,
        decode_offload_manager=None,
        draft_worker=None,
        truncation_align_size=None,
        max_prefill_bs=0,
        # the model (played by the suite) and the parts that are not the scheduler's
        model_config=ModelConfig(),
        tp_worker=SimpleNamespace(
            model_runner=SimpleNamespace(attn_backend=object(), prefill_aware_swa=False)
        ),
        grammar_manager=NoGrammars(),
        beam_coordinator=NoBeams(),
        dp_attn_adapter=OneRank(),
        ngram_embedding_manager=NoNgramEmbedding(),
        metrics_reporter=NoMetrics(),
        load_inquirer=SimpleNamespace(_get_num_pending_tokens=lambda **_: 0, get_loads=_no),
        publish_load_snapshot=_no,
        load_publisher=SimpleNamespace(publish_load_stat=_no),
        _record_step_counters=_no,
        maybe_send_health_check_signal=_no,
        _maybe_clear_mm_inputs=_no,
        dllm_manager=SimpleNamespace(any_staging_reqs=lambda: False),
        _pp_microbatches_drained=lambda: True,
    )
    base.init_schedule_policy(s)
    result_module = modules["sglang.srt.managers.scheduler_components.batch_result_processor"]
    s.batch_result_processor = result_module.SchedulerBatchResultProcessor(
        is_generation=True,
        disaggregation_mode=s.disaggregation_mode,
        enable_overlap=False,
        enable_overlap_mlx=False,
        model_config=s.model_config,
        token_to_kv_pool_allocator=allocator,
        tree_cache=tree_cache,
        hisparse_coordinator=None,
        req_to_token_pool=req_to_token_pool,
        decode_offload_manager=None,
        metrics_collector=None,
        metrics_reporter=s.metrics_reporter,
        draft_worker=None,
        model_worker=None,
        logprob_result_processor=None,
        output_streamer=Outbox(),
        beam_coordinator=s.beam_coordinator,
        abort_request=_no,
    )
    assert "torch" in sys.modules
    return s
