"""TokenSpeed's scheduler as an engine driver: every call is one of its own.

TokenSpeed (``tokenspeed-scheduler`` on the package index: C++ behind Python bindings)
plans each round itself: ``submit_requests``, then ``next_execution_plan`` (its forward
batches with their block tables and prefix hits, the pages to copy and to clear, its own
aborts), then ``advance`` with what the model produced (a token per row that reached the
end of its tokens, none for a prompt chunk, ``Finish`` for a stop, ``Abort`` for a client
that left), and ``drain_kv_events``. The driver only translates: the model's results are
the suite's, every decision is the scheduler's.

Set up as one full-attention group whose page is the block, with the host (L2) cache and
retraction off (a snapshot pool of only its null page: it never preempts), so every page
it plans is a device page the suite can follow. Requests carry no cache salt: TokenSpeed's
``RequestSpec`` has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kvpool.spec.events import BlockRemoved, BlockStored, Event

from ...machines.engine.driver import Batch, EngineSetup, Sampled, ScheduledRequest, Submission

#: The one cache group the suite sets up.
GROUP = "kv"


def fine_hash(value: int) -> bytes:
    """TokenSpeed's 64-bit block hash as the spec's events name hashes (32 bytes)."""
    return value.to_bytes(32, "big")


class TokenSpeedDriver:
    """One TokenSpeed ``Scheduler`` for one engine setup."""

    #: ``swaps_in_cached``: a prompt page it publishes whose prefix is already cached is
    #: deduplicated onto the cached page, and the request's table then names that page.
    capabilities = frozenset(
        {"tables", "abort", "events", "free_count", "flush", "swaps_in_cached"}
    )

    def __init__(self, ts: ModuleType, setup: EngineSetup, name: str) -> None:
        self.name = name
        self.ts = ts
        config = ts.SchedulerConfig()
        config.num_device_pages = setup.num_blocks  # page 0 is the null page
        config.max_scheduled_tokens = setup.max_batch_tokens
        config.max_batch_size = setup.max_batch_size
        config.prefix_granularity = setup.block_size
        config.disable_prefix_cache = not setup.enable_caching
        config.enable_kv_cache_events = setup.enable_kv_cache_events
        config.decode_input_tokens = 1
        config.disable_l2_cache = True
        config.num_host_pages = 1
        config.num_snapshot_pages = 1  # only the null page: it never retracts
        config.cache_groups = [
            ts.CacheGroupConfig(GROUP, setup.block_size, setup.num_blocks, ts.AttnKind.Full)
        ]
        self.scheduler: Any = ts.Scheduler(config)
        #: The rows of the last plan: request id -> whether it was a decode row.
        self.rows: dict[str, bool] = {}

    def submit(self, request: Submission) -> None:
        spec = self.ts.RequestSpec()
        spec.request_id = request.request_id
        spec.tokens = list(request.prompt)
        spec.max_new_tokens = request.max_new_tokens
        self.scheduler.submit_requests([spec])

    def step(self) -> Batch:
        plan = self.scheduler.next_execution_plan()
        self.rows = {}
        scheduled = []
        for op in plan.forward:
            tables = dict(op.block_tables).get(GROUP, [])
            extends = op.num_extends()
            for row, rid in enumerate(op.request_ids):
                count = int(op.input_lengths[row])
                if row < extends:
                    start = int(op.extend_prefix_lens[row])
                else:  # a decode row computes the last of the request's tokens
                    start = int(self.scheduler.request_token_size(rid)) - count
                self.rows[rid] = row >= extends
                row_pages = tables[row] if row < len(tables) else []
                table = tuple(int(p) for p in row_pages if int(p) > 0)  # rows are padded
                scheduled.append(ScheduledRequest(rid, start, count, (table,)))
        copies = tuple((int(s), int(d)) for s, d in dict(plan.pages_to_copy).get(GROUP, []))
        zeroed = tuple(int(p) for p in dict(plan.pages_to_zero).get(GROUP, []))
        ended = tuple(abort.request_id for abort in plan.aborts)
        return Batch(tuple(scheduled), (), copies, zeroed, ended)

    def report(self, results: Sequence[Sampled]) -> None:
        ts, sampled = self.ts, {r.request_id: r for r in results}
        event = ts.ExecutionEvent()
        for rid, decode in self.rows.items():
            result = ts.ForwardEvent.ExtendResult()
            result.request_id = rid
            got = sampled.get(rid)
            result.tokens = [] if got is None else [got.token]  # none for a prompt chunk
            event.add_event(result)
            if got is not None and got.stop:
                event.add_event(self._request_event("Finish", rid))
            elif got is not None and decode:
                reserve = ts.ForwardEvent.UpdateReserveNumTokens()
                reserve.request_id = rid
                reserve.reserve_num_tokens_in_next_schedule_event = 1
                event.add_event(reserve)
        self.rows = {}
        self.scheduler.advance(event)

    def abort(self, request_id: str) -> None:
        event = self.ts.ExecutionEvent()
        event.add_event(self._request_event("Abort", request_id))
        self.scheduler.advance(event)

    def drain_events(self) -> list[Event]:
        events: list[Event] = []
        for event in self.scheduler.drain_kv_events():
            hashes = tuple(fine_hash(h) for h in event.block_hashes)
            if type(event).__name__ == "BlockRemoved":
                events += [BlockRemoved(h, 0) for h in hashes]
                continue
            parent = event.parent_block_hash
            events.append(
                BlockStored(
                    hashes,
                    None if parent is None else fine_hash(parent),
                    0,
                    int(event.block_size),
                    len(event.token_ids),
                )
            )
        return events

    def free_count(self) -> int:
        return int(self.scheduler.available_lcm_blocks())

    def flush(self) -> bool:
        return bool(self.scheduler.clear_cache())

    def _request_event(self, kind: str, request_id: str) -> Any:
        event = getattr(self.ts.ForwardEvent, kind)()
        event.request_id = request_id
        return event
