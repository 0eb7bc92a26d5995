"""One engine test case: the clients and the model around an engine's own scheduler.

:class:`EngineRun` applies the machine's actions (:mod:`.actions`) to a driver and judges
every step by the request-level properties (:mod:`kvpool.spec.manager.properties`, through
the request machine's :class:`~..requests.checks.RequestChecks`) on what the driver shows,
and, for a driver publishing KV events, by the events level's consumer model. The suite
plays the model, so it knows what every block holds: each batch's forward pass writes the
scheduled tokens into the blocks the engine's tables name, and a request whose step
reaches the end of its tokens samples :func:`~.actions.model_token`.

A property the driver gives no data for is never evaluated, so never counted: the result
table then says it was not checked.
"""

from __future__ import annotations

from typing import Any

from kvpool.spec import PoolConfig
from kvpool.spec.manager import Broken, ManagerConfig, Scheduled, Tables
from kvpool.spec.manager import properties as props
from kvpool.spec.manager.compute import write
from kvpool.spec.manager.extra_keys import Signature

from ...consumers.judge import StreamJudge
from ..pool.lockstep import Nonconformance, RunRecord
from ..pool.target import PoolView
from ..requests.checks import PropertyBroken, RequestChecks, Tracked
from ..requests.target import RequestSetup
from .actions import Abort, Arrive, EngineAction, RunStep, model_token
from .clients import Client
from .driver import (
    Batch,
    EngineDriver,
    EngineDriverFactory,
    EngineSetup,
    Sampled,
    ScheduledRequest,
    Submission,
    close,
    drained,
    event_parents,
)
from .operations import operation_of


def request_setup(setup: EngineSetup) -> RequestSetup:
    """The request level's terms for an engine setup: one full-attention group over a pool
    of ``num_blocks`` keyed at the block size."""
    return RequestSetup(
        ManagerConfig(setup.block_size),
        PoolConfig(
            setup.num_blocks,
            enable_caching=setup.enable_caching,
            hash_block_size=setup.block_size,
            enable_kv_cache_events=setup.enable_kv_cache_events,
        ),
    )


class EngineRun:
    """A fresh engine from ``factory`` for ``setup``, driven by the machine's actions."""

    def __init__(
        self,
        factory: EngineDriverFactory,
        setup: EngineSetup,
        record: RunRecord | None = None,
        consumer: str | None = None,
    ) -> None:
        self.record = record if record is not None else RunRecord()
        self.record.trace = []
        self.record.config = setup
        self.setup = setup
        self.driver: EngineDriver = factory(setup)
        self.can = frozenset(self.driver.capabilities)
        self.checks = RequestChecks(request_setup(setup), self.record.properties)
        self.clients: dict[str, Client] = {}
        #: Every request id sent so far, and the finished turns (tokens, salt): the
        #: sessions' next turns start from these.
        self.sent: set[str] = set()
        self.finished: list[tuple[tuple[int, ...], str | None]] = []
        #: Requests that ended (finished or aborted) with what their KV depends on: a
        #: batch planned ahead may still compute one (``plans_ahead``).
        self.gone: dict[str, Signature] = {}
        #: The requests the current batch starts, with their tables (``keys_within_pass``).
        self.started: dict[str, Tables] = {}
        judged = consumer is not None and "events" in self.can
        self.events = StreamJudge(consumer) if judged and consumer else None

    # --- what may be drawn / replayed -----------------------------------------------------

    def allows(self, action: EngineAction) -> bool:
        """Whether ``action`` makes sense now and the driver can take it (replays skip the
        others: a shrunk sequence may have lost the arrival an abort names)."""
        return operation_of(action).allowed(self, action)

    def apply(self, action: EngineAction) -> None:
        self.record.trace.append(action)
        self.record.steps += 1
        self.record.operations[action.operation] += 1
        operation_of(action).take(self, action)

    def close(self) -> None:
        close(self.driver)

    # --- the clients -----------------------------------------------------------------------

    def arrive(self, action: Arrive) -> None:
        rid = action.request_id
        self.driver.submit(Submission(rid, action.prompt, action.salt, action.max_new_tokens))
        self.sent.add(rid)
        self.clients[rid] = Client(action.prompt, action.salt, action.max_new_tokens)
        self.checks.admitted(rid, action.prompt, action.salt)

    def abort(self, action: Abort) -> None:
        """A client gives up on a live request: the engine drops it, its blocks given back."""
        driver: Any = self.driver
        driver.abort(action.request_id)
        self.leave(action.request_id, finished=True)
        self.judge_events("abort")
        self.step_done()

    def flush(self) -> None:
        """The operator drops the prefix cache (the idle pool's free count is judged on the
        driver's verdict)."""
        driver: Any = self.driver
        done = bool(driver.flush())
        self.judge_events("flush")
        self.step_done(reset_result=done)

    def leave(self, rid: str, finished: bool) -> None:
        """``rid`` finished or was aborted (``finished``), or was preempted."""
        client = self.clients[rid]
        if finished:
            del self.clients[rid]
            self.gone[rid] = Signature(client.tokens, client.salt)
            self.finished.append((client.tokens, client.salt))
        else:
            client.status = "waiting"
        tracked = self.checks.requests.get(rid)
        if tracked is not None and tracked.running:
            self.checks.released(rid, self.view(), finished=finished)
        elif finished and tracked is not None:
            del self.checks.requests[rid]

    # --- one engine step -------------------------------------------------------------------

    def run_step(self, action: RunStep) -> None:
        batch: Batch = self.driver.step()
        self.record.situations.update(
            {"preempted": len(batch.preempted), "copied": len(batch.copies)}
        )
        for rid in batch.preempted:
            self.known(rid, "preempted")
            self.leave(rid, finished=False)
        for src, dst in batch.copies:
            self.checks.copy(src, dst)
        for block in batch.zeroed:
            self.checks.contents.pop(block, None)
            self.checks.origin.pop(block, None)
        in_flight = [p for p in batch.scheduled if self.in_flight(p)]
        live = [p for p in batch.scheduled if p not in in_flight]
        for planned in live:
            self.known(planned.request_id, "scheduled")
        self.started = {
            p.request_id: p.tables or ()
            for p in live
            if self.clients[p.request_id].status == "waiting"
        }
        for planned in batch.scheduled:
            if planned in in_flight:
                self.write_ended(planned)
            else:
                self.schedule(planned, batch.copies)
        if "plans_ahead" in self.can:  # settled now; after report() the next plan shows
            self.raise_broken(self.refcounts_match(self.view()))
        results = []
        for planned in live:
            client = self.clients[planned.request_id]
            if planned.start + planned.num_tokens < len(client.tokens):
                continue  # a chunk of its prompt: nothing to sample yet
            token = model_token(client.tokens)
            last = len(client.output) + 1 >= client.max_new_tokens
            results.append(
                Sampled(planned.request_id, token, planned.request_id in action.stops or last)
            )
        self.driver.report(results)
        dropped = frozenset(self.driver_dropped())
        for result in results:
            if result.request_id in dropped:
                continue  # the engine never took it in: the client never sees it
            self.clients[result.request_id].output += (result.token,)
            if result.stop:
                self.leave(result.request_id, finished=True)
            else:
                self.checks.appended(result.request_id, (result.token,))
        for rid in batch.ended:
            if rid in self.clients:
                self.leave(rid, finished=True)
        self.judge_events("step")
        self.step_done()

    def driver_dropped(self) -> tuple[str, ...]:
        """The requests whose result of the last batch the engine dropped
        (``drops_results``)."""
        if "drops_results" not in self.can:
            return ()
        driver: Any = self.driver
        return tuple(driver.dropped())

    def in_flight(self, planned: ScheduledRequest) -> bool:
        """Whether ``planned`` is a request that ended after a driver that ``plans_ahead``
        planned (and dispatched) the batch: the pass still computes it."""
        rid = planned.request_id
        return "plans_ahead" in self.can and rid not in self.clients and rid in self.gone

    def write_ended(self, planned: ScheduledRequest) -> None:
        """The pass writes an ended request's tokens into the blocks its table held when
        the batch was planned (what a hit on them later reads); nothing of it is judged:
        the request is gone, its blocks given back, the write is the pass's."""
        signature = self.gone[planned.request_id]
        bs = self.setup.block_size
        end = min(planned.start + planned.num_tokens, len(signature.tokens))
        for table in planned.tables or ():
            for i in range(planned.start // bs, min(-(-end // bs), len(table))):
                lo, hi = max(planned.start, i * bs), min(end, (i + 1) * bs)
                block = table[i]
                self.checks.contents[block] = write(
                    self.checks.contents.get(block),
                    signature.salt,
                    lo - i * bs,
                    signature.tokens[lo:hi],
                )
                self.checks.origin[block] = signature

    def known(self, rid: str, what: str) -> None:
        if rid not in self.clients:
            raise Nonconformance(
                f"after step: the engine {what} request {rid!r}, which is not live "
                "(never sent, finished or aborted)"
            )

    def schedule(self, planned: ScheduledRequest, copies: tuple[tuple[int, int], ...]) -> None:
        """One request of the batch: judged as scheduled, then its tokens written. An
        entry the batch copied into a new block may move there with its data (the
        engine's copy-on-write): ``append-only`` judges the table with that move made."""
        rid = planned.request_id
        client = self.clients[rid]
        fresh = client.status == "waiting"
        client.status = "running"
        if fresh and planned.start:
            self.record.situations["hit"] += 1
        end = planned.start + planned.num_tokens
        whole = planned.start >= len(client.tokens)
        if fresh and (planned.tables is None or whole):  # else checks.scheduled judges it
            self.record.properties["computes-last-token"] += 1
            broken = props.computes_last_token(rid, planned.start, len(client.tokens))
            if broken:
                raise PropertyBroken(broken)
        if planned.num_tokens < 1 or end > len(client.tokens):
            raise Nonconformance(
                f"after step: the engine scheduled tokens {planned.start}..{end - 1} of "
                f"request {rid!r}, which has {len(client.tokens)}"
            )
        if planned.tables is None:  # no tables shown: only the hit itself is judged
            self.checks.requests[rid].running = True
            self.checks.requests[rid].num_computed_tokens = end
            return
        view = self.view()
        tracked = self.checks.requests[rid]
        if not fresh and copies:
            tracked.tables = moved(tracked.tables, planned.tables, frozenset(copies))
        if not fresh and "swaps_in_cached" in self.can:
            tracked.tables = self.swapped(tracked, planned.tables)
        scheduled = Scheduled(planned.start, planned.tables)
        self.checks.scheduled(rid, scheduled, view, fresh)
        self.write(rid, planned, view)
        self.checks.requests[rid].num_computed_tokens = end

    def swapped(self, tracked: Tracked, after: Tables) -> Tables:
        """``tracked``'s tables with each computed entry that ``after`` holds in another
        block, written (or copied from one written) for the same prefix, tokens and salt,
        up to the entry's end or the computed boundary, taken as replaced."""
        bs = self.setup.block_size
        computed = tracked.num_computed_tokens
        tables = []
        for g, table in enumerate(tracked.tables):
            now = after[g] if g < len(after) else ()
            entries = list(table)
            for i in range(min(-(-computed // bs), len(table), len(now))):
                writer = self.checks.origin.get(now[i])
                end = min((i + 1) * bs, computed)
                if (
                    now[i] != table[i]
                    and writer is not None
                    and writer.salt == tracked.salt
                    and writer.tokens[:end] == tracked.tokens[:end]
                ):
                    entries[i] = now[i]
            tables.append(tuple(entries))
        return tuple(tables)

    def write(self, rid: str, planned: ScheduledRequest, view: PoolView) -> None:
        """The forward pass writes the request's tokens ``start`` .. ``start + num_tokens
        - 1`` into the blocks its tables hold there (``write-guard`` first, where the
        driver shows ref counts)."""
        tracked = self.checks.requests[rid]
        bs = self.setup.block_size
        end = planned.start + planned.num_tokens
        assert planned.tables is not None
        for g, table in enumerate(planned.tables):
            first, last = planned.start // bs, (end - 1) // bs
            if last >= len(table):
                raise Nonconformance(
                    f"after step: request {rid!r} computes tokens up to {end - 1} but its "
                    f"table in group {g} has {len(table)} block(s): {list(table)}"
                )
            for i in range(first, last + 1):
                block = table[i]
                lo, hi = max(planned.start, i * bs), min(end, (i + 1) * bs)
                if view.ref_cnt is not None:
                    self.guard(rid, block, view.ref_cnt, f"write of tokens {lo}..{hi - 1}")
                self.checks.contents[block] = write(
                    self.checks.contents.get(block),
                    tracked.salt,
                    lo - i * bs,
                    tracked.tokens[lo:hi],
                )
                self.checks.origin[block] = tracked.signature

    def guard(self, rid: str, block: int, ref_cnt: tuple[int, ...], what: str) -> None:
        """``write-guard`` as far as ref counts show it: the written block is real and
        held once (keys in the spec's form are not shown by an engine)."""
        self.record.properties["write-guard"] += 1
        if not 0 < block < len(ref_cnt):
            where = f"{what} into block {block}, no block of the pool"
            broken = [Broken("write-guard", where, rid, block)]
        elif self.read_in_pass(rid, block, ref_cnt[block]):
            broken = []
        else:
            broken = props.write_guard(rid, block, ref_cnt[block], frozenset(), what)
        if broken:
            raise PropertyBroken(broken)

    def read_in_pass(self, rid: str, block: int, holders: int) -> bool:
        """Whether, for a driver declaring ``keys_within_pass``, every holder of ``block``
        but the writer ``rid`` is a request this batch started: they read it in the pass
        that writes it."""
        if "keys_within_pass" not in self.can or holders < 2:
            return False
        readers = [
            other
            for other, tables in self.started.items()
            if other != rid and any(block in table for table in tables)
        ]
        return 1 + len(readers) == holders

    # --- after each action -------------------------------------------------------------

    def view(self) -> PoolView:
        """What the driver shows of the KV cache (``free_count`` -1: not shown)."""
        driver: Any = self.driver
        free = int(driver.free_count()) if "free_count" in self.can else -1
        ref_cnt = tuple(driver.ref_counts()) if "ref_counts" in self.can else None
        return PoolView(free_count=free, ref_cnt=ref_cnt)

    def step_done(self, reset_result: bool | None = None) -> None:
        """``refcounts-match-tables`` and ``idle-pool-free``, where the driver shows the
        data they need (for a driver that ``plans_ahead``, the first after each batch's
        writes instead, and the second only while no request is live)."""
        view = self.view()
        settled = "plans_ahead" not in self.can
        broken = self.refcounts_match(view) if settled else []
        idle = not any(c.status == "running" for c in self.clients.values())
        idle = idle and (settled or not self.clients)  # else a waiting one may be planned
        if idle and (view.free_count >= 0 or reset_result is not None):
            self.record.properties["idle-pool-free"] += 1
            free = view.free_count if view.free_count >= 0 else self.setup.num_blocks - 1
            broken += props.idle_pool(self.setup.num_blocks, free, reset_result)
        self.raise_broken(broken)

    def refcounts_match(self, view: PoolView) -> list[Broken]:
        """``refcounts-match-tables`` on ``view``, where the driver shows the data."""
        if view.ref_cnt is None or "tables" not in self.can:
            return []
        self.record.properties["refcounts-match-tables"] += 1
        live = [r.tables for r in self.checks.requests.values() if r.running]
        return props.refcounts(live, view.ref_cnt)

    @staticmethod
    def raise_broken(broken: list[Broken]) -> None:
        if broken:
            raise PropertyBroken(broken)

    def judge_events(self, operation: str) -> None:
        """The events the engine published since the last step, fed to the consumer model
        (the stream's own properties: every parent and every removal known), then, where
        the driver shows its cache's chain (``event_parents``), the parent each stored page
        names against it (``events-parent-chain``)."""
        if self.events is None:
            return
        events = drained(self.driver)
        found = self.events.feed(events, None)
        parents = event_parents(self.driver)
        if not found and parents is not None:
            found = self.events.chain(events, parents)
        self.record.properties.update(self.events.checked)
        self.events.checked.clear()
        if found:
            raise Nonconformance(self.events.finding(found[0], operation, events))


def moved(before: Tables, after: Tables, copies: frozenset[tuple[int, int]]) -> Tables:
    """``before`` with each entry that ``after`` holds in the block it was copied to."""
    tables = []
    for g, table in enumerate(before):
        now = after[g] if g < len(after) else ()
        tables.append(
            tuple(
                now[i] if i < len(now) and (was, now[i]) in copies else was
                for i, was in enumerate(table)
            )
        )
    return tuple(tables)
