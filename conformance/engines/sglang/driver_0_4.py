"""SGLang 0.4's scheduler as an engine driver: every decision is the release's own.

SGLang 0.4's ``Scheduler.event_loop_normal`` (the loop without the overlap thread: the
server's ``--disable-overlap-schedule``) takes a tokenized request with
``handle_generate_request``, plans with ``get_next_batch_to_run()``, runs the planned batch
with ``run_batch`` and hands its result to ``process_batch_result``; with nothing planned it
checks its memory (``check_memory``) and resets its new-token ratio; then the batch is
``last_batch``. The driver makes exactly those calls, on the release's ``Scheduler``
methods, and reads what they leave: each scheduled ``Req``'s row of the ``ReqToTokenPool``
(its pages), its ``prefix_indices`` (the hit the tree granted), the requests retraction
put back in the waiting queue, the allocator's free slots and the tree's evictable ones.
Inside those methods run the release's ``PrefillAdder``, ``SchedulePolicy``,
``Req.init_next_round_input`` and ``check_finished``, ``ScheduleBatch.prepare_for_extend``
/ ``prepare_for_decode`` / ``check_decode_mem`` / ``retract_decode`` / ``filter_batch`` /
``merge_batch`` (with their allocation and eviction), the output processor
(``process_batch_result_prefill`` / ``_decode``: ``cache_unfinished_req`` after a
prefill, ``cache_finished_req`` at a finish) and the ``RadixCache``.

**What is not SGLang's.** ``Scheduler.__init__`` starts a GPU model worker, IPC sockets, a
tokenizer and a watchdog thread, so the scheduler object is made without it. Its
attributes are set by ``__init__``'s own statements (:func:`_init_statements`: each
statement of ``__init__`` that assigns only attributes the loop reads, run unchanged on
the object), over what the parts that do not run would give: the server settings
(``ServerArgs``' declared defaults, with the setup's and a CPU server's:
:func:`_server_args`), the model worker (:class:`ModelWorker`: the suite plays the model;
it reports the pools' sizes as ``get_worker_info`` does and returns the suite's sampled
tokens from ``forward_batch_generation``), the memory pools it would build
(``ReqToTokenPool`` and the token allocator, built as ``ModelRunner.init_memory_pool``
builds them), the model config (a vocabulary, an end-of-sequence token), no tokenizer
(``skip_tokenizer_init``: the suite sends token ids) and the output sockets
(``send_pyobj`` that drops, as ``__init__`` gives ranks that do not stream). An attribute
the methods read that is not given raises :class:`NotWired`, a loading error naming it,
never a finding.

**KV events.** The tree is built with ``enable_kv_cache_events`` when the setup asks for
events; the scheduler's ``_publish_kv_events`` hands its batches to the publisher
(:class:`EventCollector`, standing in for the ZMQ publisher), and :meth:`drain_events`
returns those, then what the tree holds not yet published, in the tree's order.

**Setup.** SGLang's slot ``s`` is in the suite's block ``s // page``; the page is the
suite's block (``page=1``: one token a block; larger pages: a power of two, the kernels
in triton's interpreter). Chunked prefill and the prefill budget are the setup's batch
tokens, the running requests its batch size. No salt (0.4 has none), no abort is declared
(``abort_request`` takes the tokenizer's ``AbortReq`` over IPC).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from kvpool.spec.events import Event

from ...machines.engine.driver import Batch, EngineSetup, Submission
from .driver import MAX_CONTEXT
from .scheduler_reading import EOS, NotWired, ReadsScheduler, strict, unwired
from .scheduler_release_0_4 import SglangScheduler04, require_kernels
from .tree_view import spec_events

#: What ``Scheduler.__init__`` sets that the loop reads, set by ``__init__``'s own
#: statements (:func:`_init_statements`).
WIRED = frozenset(
    {
        "server_args", "tp_rank", "pp_rank", "tp_size", "pp_size", "dp_size",
        "schedule_policy", "lora_paths", "max_loras_per_batch", "enable_overlap",
        "skip_tokenizer_init", "enable_metrics", "enable_kv_cache_events", "stream_interval",
        "spec_algorithm", "gpu_id", "enable_hierarchical_cache", "page_size",
        "max_total_num_tokens", "max_prefill_tokens", "max_running_requests", "max_req_len",
        "max_req_input_len", "random_seed", "device",
        "waiting_queue", "running_batch", "cur_batch", "last_batch", "forward_ct",
        "forward_ct_decode", "num_generated_tokens", "num_prefill_tokens",
        "last_decode_stats_tic", "last_prefill_stats_tic", "return_health_check_ct",
        "sessions", "chunked_prefill_size", "chunked_req", "is_mixed_chunk", "grammar_queue",
        "policy", "init_new_token_ratio", "min_new_token_ratio", "new_token_ratio_decay",
        "new_token_ratio", "forward_sleep_time", "torch_profiler", "profiler_target_forward_ct",
    }
)  # fmt: skip


class ModelConfig:
    """The model as the scheduler reads it: a vocabulary, its end-of-sequence token, a
    decoder-only text model."""

    vocab_size = 16
    hf_eos_token_id = frozenset({EOS})
    is_encoder_decoder = False
    is_multimodal = False
    is_multimodal_gen = False
    is_generation = True
    context_len = MAX_CONTEXT - 4

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return strict(f"model_config.{name}")


class ModelWorker:
    """The model worker (``TpModelWorker``), played by the suite: it reports the memory
    pools' sizes as ``get_worker_info`` does, and a forward pass returns the tokens the
    suite sampled (:meth:`SglangScheduler04Driver.report` sets them)."""

    def __init__(self, setup: EngineSetup, tokens: int) -> None:
        self.info: tuple[object, ...] = (
            tokens,  # max_total_num_tokens
            setup.max_batch_tokens,  # max_prefill_tokens
            setup.max_batch_size,  # max_running_requests
            MAX_CONTEXT - 4 - 1,  # max_req_len: context_len - 1
            MAX_CONTEXT - 4 - 1,  # max_req_input_len
            0,  # random_seed
            "cpu",
            {},  # the worker's global settings (given by the driver)
            None,
            None,
            None,
        )
        self.next_token_ids: Any = None

    def get_worker_info(self) -> tuple[object, ...]:
        return self.info

    def forward_batch_generation(self, model_worker_batch: Any) -> tuple[None, Any, bool]:
        tokens, self.next_token_ids = self.next_token_ids, None
        if tokens is None:
            raise NotWired("SGLang ran a forward pass the suite did not sample for")
        return None, tokens, False


class EventCollector:
    """The KV event publisher (``EventPublisherFactory.create``'s ZMQ publisher): keeps
    the events of the batches ``_publish_kv_events`` hands it, and hands each batch on to
    ``forward`` when given (route-check's stream: the release's own ``ZmqEventPublisher``)."""

    def __init__(self, forward: Any = None) -> None:
        self.events: list[Any] = []
        self.forward = forward

    def publish(self, batch: Any) -> None:
        self.events.extend(batch.events)
        if self.forward is not None:
            self.forward.publish(batch)


def _no(*_: object, **__: object) -> None:
    return None


class SglangScheduler04Driver(ReadsScheduler):
    """One SGLang 0.4 ``Scheduler`` (its methods, on its own cache objects) for one setup."""

    #: ``swaps_in_cached``: ``cache_unfinished_req`` points a request at the tree's slots
    #: where another request cached the same prefix first (and frees its own copy).
    capabilities = frozenset({"tables", "free_count", "flush", "swaps_in_cached", "events"})

    def __init__(
        self, release: SglangScheduler04, setup: EngineSetup, name: str, publisher: Any = None
    ) -> None:
        """``publisher``: where the scheduler's event batches go too (:class:`EventCollector`)."""
        require_kernels(setup.block_size)
        self.name = name
        self.release = release
        self.page = setup.block_size
        self.events = EventCollector(publisher)
        with release.active():
            self.scheduler = _wire(release, setup, self.events)
            #: ``global_server_args_dict`` as this scheduler set it (a module global:
            #: put back before each call).
            self.globals = dict(release.schedule_batch.global_server_args_dict)
        #: request id -> its ``Req`` while the client waits for it.
        self.reqs: dict[str, Any] = {}
        #: The batch planned last, until its result is reported.
        self.batch: Any = None

    def _active(self) -> Any:
        self.release.schedule_batch.global_server_args_dict.update(self.globals)
        return self.release.active()

    # --- the boundary -----------------------------------------------------------------

    def submit(self, request: Submission) -> None:
        """The tokenizer manager's request (its ``TokenizedGenerateReqInput``, sampling
        parameters normalized and verified as it does), handled by
        ``handle_generate_request``."""
        release = self.release
        with self._active():
            params = release.sampling_params.SamplingParams(max_new_tokens=request.max_new_tokens)
            params.normalize(None)
            params.verify()
            recv = release.io_struct.TokenizedGenerateReqInput(
                rid=request.request_id,
                input_text="",
                input_ids=list(request.prompt),
                mm_inputs=None,
                sampling_params=params,
                return_logprob=False,
                logprob_start_len=-1,
                top_logprobs_num=0,
                token_ids_logprob=None,
                stream=False,
            )
            release.scheduler.Scheduler.handle_generate_request(self.scheduler, recv)
        (req,) = [r for r in self.scheduler.waiting_queue if r.rid == request.request_id]
        self.reqs[request.request_id] = req

    def step(self) -> Batch:
        s, release = self.scheduler, self.release
        admitted = self._admitted()
        with self._active():
            batch = release.scheduler.Scheduler.get_next_batch_to_run(s)
        s.cur_batch = self.batch = batch
        if batch is None:
            with self._active():  # event_loop_normal's idle pass
                release.scheduler.Scheduler.check_memory(s)
            s.new_token_ratio = s.init_new_token_ratio
            s.last_batch = None
        return self._planned(batch, admitted)

    def _ran(self, batch: Any, tokens: list[int]) -> None:
        """``run_batch`` with the model worker answering the model's tokens, then
        ``process_batch_result``."""
        import torch

        s, release = self.scheduler, self.release
        s.tp_worker.next_token_ids = torch.tensor(tokens, dtype=torch.int64)
        with self._active():
            result = release.scheduler.Scheduler.run_batch(s, batch)
            release.scheduler.Scheduler.process_batch_result(s, batch, result)

    def drain_events(self) -> list[Event]:
        """The events the scheduler published since the last call, then those the tree
        holds not yet published (``BlockStored`` per node, parent by the node's hash), as
        the spec's events."""
        taken, self.events.events = self.events.events, []
        with self._active():
            taken += self.scheduler.tree_cache.take_events()
        return list(spec_events(taken, "BlockStored", "BlockRemoved"))

    def flush(self) -> bool:
        """``Scheduler.flush_cache``, reached at the top of a loop pass; after the last
        batch the loop has passed idly first (its ``get_next_batch_to_run`` merged and
        filtered the finished requests out of ``last_batch``)."""
        if self.scheduler.last_batch is not None and self.step().scheduled:
            raise NotWired("SGLang planned a batch in the idle pass before a flush")
        with self._active():
            flushed = self.release.scheduler.Scheduler.flush_cache(self.scheduler)
        return bool(flushed)

    # --- reading what the scheduler left --------------------------------------------------

    def _extended(self, req: Any) -> tuple[int, int]:
        return len(req.prefix_indices), len(req.fill_ids)

    def _row(self, req: Any) -> int:
        return int(req.req_pool_idx)


class SglangScheduler04Drivers:
    """Drivers of one 0.4 release with pages of ``block_size`` tokens (the engine machine
    then draws its setups with that block size), or of the drawn block size (``None``)."""

    def __init__(self, release: SglangScheduler04, name: str, block_size: int | None) -> None:
        self.release, self.name, self.block_size = release, name, block_size

    def __call__(self, setup: EngineSetup) -> SglangScheduler04Driver:
        if self.block_size is not None:  # the machine draws with it; a probe may not
            setup = replace(setup, block_size=self.block_size)
        return SglangScheduler04Driver(self.release, setup, self.name)


def _server_args(release: SglangScheduler04, setup: EngineSetup) -> Any:
    """``ServerArgs`` at the release's declared defaults, with the setup's budget and page
    size and what a server on the CPU without the overlap thread is launched with; any
    other setting read raises :class:`NotWired`."""
    import dataclasses

    values = {
        f.name: getattr(release.server_args, f.name)
        for f in dataclasses.fields(release.server_args)
        if hasattr(release.server_args, f.name)
    }
    values.update(
        chunked_prefill_size=setup.max_batch_tokens,
        max_prefill_tokens=setup.max_batch_tokens,
        max_running_requests=setup.max_batch_size,
        page_size=setup.block_size,
        disable_radix_cache=not setup.enable_caching,
        disable_overlap_schedule=True,
        skip_tokenizer_init=True,
        device="cpu",
        attention_backend="torch_native",
        kv_events_config="kvpool" if setup.enable_kv_cache_events else None,
        # resolved by __post_init__ at launch: no DeepEP MoE
        enable_sp_layernorm=False,
    )

    class Settings(SimpleNamespace):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return strict(f"server_args.{name}")

    return Settings(**values)


def _init_statements(release: SglangScheduler04) -> ast.Module:
    """The statements of ``Scheduler.__init__`` that assign only attributes of
    :data:`WIRED` (or ``global_server_args_dict`` entries), unchanged, in order."""
    init = release.scheduler.Scheduler.__init__
    source = textwrap.dedent(inspect.getsource(init))
    (function,) = ast.parse(source).body
    assert isinstance(function, ast.FunctionDef)
    kept: list[ast.stmt] = []
    for statement in function.body:
        stored = [
            node
            for node in ast.walk(statement)
            if isinstance(getattr(node, "ctx", None), ast.Store) and not isinstance(node, ast.Tuple)
        ]
        if stored and all(_wired(node) for node in stored):
            kept.append(statement)
    return ast.Module(body=kept, type_ignores=[])


def _wired(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in WIRED
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Name) and node.value.id == "global_server_args_dict"
    # the worker's reply's unused parts and global settings (given by the driver)
    return isinstance(node, ast.Name) and node.id in {"_", "worker_global_server_args_dict"}


def _wire(release: SglangScheduler04, setup: EngineSetup, events: EventCollector) -> Any:
    """A ``Scheduler`` made without ``__init__``, given what the parts of ``__init__`` that
    do not run would give, then ``__init__``'s own statements for the rest."""
    import torch

    page, slots = setup.block_size, (setup.num_blocks - 1) * setup.block_size
    server_args = _server_args(release, setup)
    if page == 1:
        allocator = release.memory_pool.TokenToKVPoolAllocator(slots, torch.float16, "cpu", None)
    else:
        paged = release.paged_allocator.PagedTokenToKVPoolAllocator
        allocator = paged(slots, page, torch.float16, "cpu", None)
    req_to_token_pool = release.memory_pool.ReqToTokenPool(
        setup.max_batch_size + 1, MAX_CONTEXT, "cpu", False
    )
    if setup.enable_caching:
        tree_cache = release.radix_cache.RadixCache(
            req_to_token_pool=req_to_token_pool,
            token_to_kv_pool_allocator=allocator,
            page_size=page,
            disable=False,
            enable_kv_cache_events=setup.enable_kv_cache_events,
        )
    else:
        chunk_cache = release.modules["sglang.srt.mem_cache.chunk_cache"]
        tree_cache = chunk_cache.ChunkCache(
            req_to_token_pool=req_to_token_pool,
            token_to_kv_pool_allocator=allocator,
            page_size=page,
        )
    base = release.scheduler.Scheduler
    s = unwired(base)
    drop = SimpleNamespace(send_pyobj=_no)
    modes: Any = release.modules["sglang.srt.disaggregation.utils"].DisaggregationMode
    s.__dict__.update(
        # the model worker and what it builds (init_memory_pool_and_cache)
        tp_worker=ModelWorker(setup, slots),
        draft_worker=None,
        req_to_token_pool=req_to_token_pool,
        token_to_kv_pool_allocator=allocator,
        tree_cache=tree_cache,
        pp_group=SimpleNamespace(is_last_rank=True),
        # the IPC sockets of a rank that does not stream, no tokenizer, the model
        send_to_tokenizer=drop,
        send_to_detokenizer=drop,
        tokenizer=None,
        processor=None,
        model_config=ModelConfig(),
        is_generation=True,
        grammar_backend=None,
        attn_tp_rank=0,
        attn_tp_size=1,
        attn_dp_rank=0,
        disaggregation_mode=modes.NULL,
        kv_event_publisher=events,
        # init_memory_pool_and_cache: no speculative decoding
        decode_mem_cache_buf_multiplier=1,
    )
    server_globals = release.schedule_batch.global_server_args_dict
    server_globals.clear()  # a fresh server process's
    server_globals.update(release.server_globals)
    # what the model runner publishes there (a plain attention model on the CPU)
    server_globals.update(
        attention_backend=server_args.attention_backend,
        device="cpu",
        use_mla_backend=False,
    )
    namespace = dict(vars(release.scheduler))
    namespace.update(self=s, server_args=server_args, tp_rank=0, pp_rank=0, dp_rank=None)
    namespace.update(gpu_id=0)
    s.server_args = server_args
    where = release.scheduler.__file__ or "scheduler.py"
    exec(compile(_init_statements(release), where, "exec"), namespace)
    base.init_metrics(s)
    return s
