"""The live scenarios: the serving workload published through vLLM's own publisher, each
consumer asked after every few batches about every prompt prefix, against the pool.

The workload is ``kvpool workload``'s (shared system prompts, multi-turn sessions,
preemption) on a target pool driven by the spec's manager, with no salted requests and
no partial entries (a router hashes tokens alone, and vLLM caches full blocks unless
told otherwise). Each batch of the target's events is published on loopback and fed, in
the same order, to every in-process consumer; the indexer process reads it off the wire.
After every ``every`` batches (and at the end) each consumer is asked, for every prompt
prefix seen so far, how many leading blocks the worker holds; the truth is what a lookup
on the spec's pool hits (:func:`~kvpool.spec.consumer.served_blocks`).

Scenarios (:data:`SCENARIOS`): ``clean`` (subscribed before the first batch), ``twins``
(the first prompts sent twice at once: duplicate copies), ``resets`` (a prefix-cache reset
between two halves), ``late-join`` (the consumers start after the first half) and
``restart`` (the engine restarts between the halves: an empty pool, a new publisher on the
same address, its sequence from 0; the consumers keep running).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvpool.spec import Observation, PoolConfig, TakeEvents, get_profile
from kvpool.spec import events as spec_events
from kvpool.spec.consumer import served_blocks
from kvpool.spec.manager import ManagerConfig, ManagerResult, RequestAction, ResetCache
from kvpool.spec.manager.actions import Admit
from kvpool.spec.manager.state import block_hashes

from ..consumers.naming import make_consumer
from ..consumers.protocol import Consumer
from ..engine.lockstep import RunRecord
from ..manager.pool_run import PoolRequestRun
from ..manager.target import RequestSetup
from ..manager.workload import Workload, WorkloadParams
from ..stream.publisher import EventTranslator, load_publisher, start_publisher
from ..stream.twins import Twins
from ..targets.loading import choose_profile, load_target
from .indexer import IndexerProcess, free_port

SCENARIOS: dict[str, str] = {
    "clean": "the consumers subscribed before the first batch",
    "twins": "the first prompts sent twice at once: each of their prefixes cached twice",
    "resets": "a prefix-cache reset between two halves of the workload",
    "late-join": "the consumers start after the first half has been published",
    "restart": "the engine restarts between the halves: an empty pool, a new publisher on "
    "the same address, its sequence from 0; the consumers keep running",
}
#: The consumer that is the indexer process (the others are built in process).
INDEXER = "dynamo-indexer"
#: How many prompt prefixes are asked about at each check (the most recent).
ASKED = 32


@dataclass
class Tally:
    """One consumer over one scenario: leading blocks held (the truth), found and claimed,
    summed over every check of every prefix; per check, the share found."""

    checks: int = 0
    held: int = 0
    found: int = 0
    claimed: int = 0
    over_time: list[float] = field(default_factory=list)

    def add(self, truth: int, claimed: int) -> None:
        self.held += truth
        self.claimed += claimed
        self.found += min(truth, claimed)

    @property
    def recall(self) -> float:
        return self.found / self.held if self.held else 1.0

    @property
    def precision(self) -> float:
        return self.found / self.claimed if self.claimed else 1.0


@dataclass
class ScenarioResult:
    name: str
    tallies: dict[str, Tally]
    published: Counter[str]
    #: The indexer's own counts of what it applied, ``"type/status"`` -> events.
    indexer: dict[str, int]
    seconds: float


@dataclass(frozen=True)
class Setting:
    """What every scenario of one run shares."""

    target: str
    release: str
    consumers: tuple[str, ...]
    requests: int = 40
    blocks: int = 64
    block_size: int = 16
    twins: int = 2
    every: int = 4
    seed: int = 0


class _Live:
    """One scenario's moving parts: the run, the publisher, the consumers, the prefixes."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        factory, _ = load_target(setting.target)
        self.factory = factory
        self.profile = get_profile(choose_profile(setting.target).name)
        self.release = load_publisher(setting.release)
        self.port = free_port()
        self.prefixes: dict[tuple[int, ...], tuple[bytes, ...]] = {}
        self.published: Counter[str] = Counter()
        self.indexer: IndexerProcess | None = None
        self.indexer_events = 0
        #: Seconds to wait for the indexer to take every event before asking it.
        self.patience = 3.0
        self.consumers: dict[str, Consumer] = {}
        self.tallies = {name: Tally() for name in setting.consumers}
        self.batches = 0
        self.publisher: Any = None
        self.new_engine()

    def new_engine(self) -> None:
        """A fresh pool and a new publisher on the same loopback port."""
        if self.publisher is not None:
            self.publisher.shutdown()
        s = self.setting
        setup = RequestSetup(
            ManagerConfig(s.block_size), PoolConfig(s.blocks, hash_block_size=s.block_size)
        )
        self.run = PoolRequestRun(self.factory, self.profile, setup, RunRecord())
        self.translator = EventTranslator(self.release, s.block_size)
        endpoint = f"tcp://*:{self.port}"
        self.publisher = start_publisher(self.release, endpoint, None, "", bind="127.0.0.1")

    def join(self) -> None:
        """The consumers start now: the in-process ones empty, the indexer subscribed."""
        for name in self.setting.consumers:
            if name == INDEXER:
                endpoint = f"tcp://127.0.0.1:{self.port}"
                self.indexer = IndexerProcess(endpoint, self.setting.block_size)
            else:
                self.consumers[name] = make_consumer(name)

    def apply(self, action: RequestAction) -> ManagerResult:
        result = self.run.apply(action)
        if isinstance(action, Admit) and action.request_id in self.run.state.requests:
            self.note_prefix(action.request_id)
        self.run.call(TakeEvents())
        observed = self.run.lockstep.last.actual
        assert isinstance(observed, Observation)
        events: tuple[spec_events.Event, ...] = observed.result  # type: ignore[assignment]
        if events:
            batch = self.translator.batch(events, self.run.state.requests, time.time())
            self.publisher.publish(batch)
            self.published.update(type(e).__name__ for e in events)
            if self.indexer is not None:
                self.indexer_events += len(batch.events)
            for consumer in self.consumers.values():
                consumer.apply(events)
            self.batches += 1
            if self.batches % self.setting.every == 0:
                self.check()
        return result

    def note_prefix(self, request_id: str) -> None:
        request = self.run.state.requests[request_id]
        bs = self.setting.block_size
        hashes = block_hashes(request, bs)
        full = len(request.tokens) // bs
        if full:
            tokens = tuple(request.tokens[: full * bs])
            self.prefixes.pop(tokens, None)
            self.prefixes[tokens] = hashes[:full]

    def check(self) -> None:
        if not self.consumers and self.indexer is None:
            return
        # every event published since the indexer joined, taken; one that lags (it dropped
        # some without counting them) is waited for briefly from then on
        if self.indexer is not None and not self.indexer.wait_applied(
            self.indexer_events, self.patience
        ):
            self.patience = 0.2
        asked = list(self.prefixes.items())[-ASKED:]
        state = self.run.lockstep.state
        now = {name: Tally() for name in self.tallies}
        for tokens, hashes in asked:
            truth = served_blocks(state, hashes, 0)
            for name in self.tallies:
                if name == INDEXER:
                    claimed = self.indexer.held_blocks(tokens) if self.indexer else 0
                elif name in self.consumers:
                    claimed = self.consumers[name].held_blocks(hashes, 0)
                else:
                    continue  # not started yet (late join)
                self.tallies[name].add(truth, claimed)
                now[name].add(truth, claimed)
        for name, tally in self.tallies.items():
            started = self.indexer is not None if name == INDEXER else name in self.consumers
            if not started:
                continue
            tally.checks += 1
            tally.over_time.append(round(now[name].recall, 4))

    def workload(self, requests: int, seed: int, twins: int = 0) -> None:
        params = WorkloadParams(
            requests=requests, prefixes=6, concurrency=6, seed=seed, salted=0.0,
            partial_entries=False,
        )  # fmt: skip
        act: Callable[[RequestAction], ManagerResult] = self.apply
        Workload(params).run(Twins(act, twins) if twins else act)

    def close(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        if self.indexer is not None:
            try:
                counts = {f"{k}/{s}": n for (k, s), n in self.indexer.applied().items() if n}
            finally:
                self.indexer.stop()
        if self.publisher is not None:
            self.publisher.shutdown()
        return counts


def run_scenario(name: str, setting: Setting) -> ScenarioResult:
    """One scenario of :data:`SCENARIOS`, start to end; the indexer always stopped."""
    started = time.monotonic()
    live = _Live(setting)
    half = max(1, setting.requests // 2)
    indexer: dict[str, int] = {}
    try:
        if name != "late-join":
            live.join()
        if name == "clean":
            live.workload(setting.requests, setting.seed)
        elif name == "twins":
            live.workload(setting.requests, setting.seed, twins=setting.twins)
        else:
            live.workload(half, setting.seed)
            live.check()
            if name == "resets":
                live.apply(ResetCache())
            elif name == "late-join":
                live.join()
            elif name == "restart":
                live.new_engine()
                time.sleep(0.5)  # the indexer's subscription reaches the new publisher
            live.workload(setting.requests - half, setting.seed + 1)
        live.check()
    finally:
        indexer = live.close()
    return ScenarioResult(
        name, live.tallies, live.published, indexer, round(time.monotonic() - started, 1)
    )


def run_scenarios(names: Sequence[str], setting: Setting) -> list[ScenarioResult]:
    return [run_scenario(n, replace(setting)) for n in names]
