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
same address, its sequence from 0; the consumers keep running) and ``data-parallel`` (two
ranks, each its own pool and its release's publisher with its ``data_parallel_rank``, which
the publisher writes into every batch and adds to its port; every consumer keeps one view
per rank; the indexer is told one listener per rank of worker 1). Each check's own recall
and precision are kept, in order (:mod:`.tally`): the curve over the run.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvpool.spec import Observation, PoolConfig, TakeEvents, get_profile
from kvpool.spec.consumer import served_blocks
from kvpool.spec.manager import ManagerConfig, ManagerResult, RequestAction, ResetCache
from kvpool.spec.manager.actions import Admit
from kvpool.spec.manager.state import block_hashes

from ...consumers.naming import make_router
from ...consumers.protocol import ConsumerError
from ...consumers.router import Prompt, Router, Wire, feeds, hook, ranks
from ...engines.vllm.isolation import Release
from ...machines.pool.lockstep import RunRecord
from ...machines.requests.pool_run import PoolRequestRun
from ...machines.requests.target import RequestSetup
from ...machines.requests.workload import Workload, WorkloadParams
from ...targets.loading import choose_profile, load_target
from ..stream.publisher import (
    ALL_INTERFACES,
    EventTranslator,
    PublisherError,
    load_publisher,
    start_publisher,
)
from ..stream.twins import Twins
from .indexer import DynamoIndexer, IndexerProcess, free_ports
from .isolation import inside
from .sglang_stream import SGLANG_CONSUMERS, SglangEngine, is_sglang
from .tally import Check, Tally

SCENARIOS: dict[str, str] = {
    "clean": "the consumers subscribed before the first batch",
    "twins": "the first prompts sent twice at once: each of their prefixes cached twice",
    "resets": "a prefix-cache reset between two halves of the workload",
    "late-join": "the consumers start after the first half has been published",
    "restart": "the engine restarts between the halves: an empty pool, a new publisher on "
    "the same address, its sequence from 0; the consumers keep running",
    "data-parallel": "two data-parallel ranks, each its own pool and publisher (its rank in "
    "every batch, its port the base plus its rank); rank 0 serves the first half, rank 1 "
    "the same prompts again in the second",
}
#: The consumer that is the indexer process (the others are built in process).
INDEXER = "dynamo-indexer"
#: How many prompt prefixes are asked about at each check (the most recent, per rank).
ASKED = 32
#: How long a router that reads the wire is given to join it before the first batch.
JOIN_SECONDS = 0.5
#: The token a router's prompt carries past its whole blocks.
PAST_LAST = 1
#: The ranks of the data-parallel scenario.
DP_RANKS = 2
#: How long a restarted engine's publisher waits for its port to be let go.
REBIND_SECONDS = 5.0


#: The events of one step, as the consumers are fed them.
Events = tuple[Any, ...]


@dataclass(frozen=True)
class _Published:
    """An event of a stream the in-process consumers do not read (SGLang's): its type only."""

    kind: str


@dataclass
class ScenarioResult:
    name: str
    tallies: dict[str, Tally]
    published: Counter[str]
    #: The indexer's own counts of what it applied, ``"type/status"`` -> events.
    indexer: dict[str, int]
    seconds: float
    #: Per consumer, one tally per data-parallel rank (the data-parallel scenario only).
    ranks: dict[str, list[Tally]] = field(default_factory=dict)
    #: The restart scenario: what the indexer counted of the new publisher's batches
    #: (:meth:`_Live.restart_counts`).
    restart: dict[str, int] = field(default_factory=dict)
    #: How each consumer was fed: ``"process"`` or ``"wire"``.
    fed: dict[str, str] = field(default_factory=dict)


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


def binds_one_interface(release: Release) -> bool:
    """Whether the release's publisher can be told to bind one interface (0.30 on: it has
    ``_is_bind_endpoint``); older ones bind only ``tcp://*:PORT``, every interface, and
    run where loopback is the only one (:mod:`.isolation`)."""
    return hasattr(release.kv_events.ZmqEventPublisher, "_is_bind_endpoint")


class _Engine:
    """One engine (one data-parallel rank): its pool driven by the spec's manager, its
    release's publisher on the base port plus its rank, the prompt prefixes it has seen."""

    def __init__(self, live: _Live, rank: int) -> None:
        s = live.setting
        setup = RequestSetup(
            ManagerConfig(s.block_size), PoolConfig(s.blocks, hash_block_size=s.block_size)
        )
        self.rank = rank
        self.run = PoolRequestRun(live.factory, live.profile, setup, RunRecord())
        self.translator = EventTranslator(live.release, s.block_size)
        # inside the namespace a wildcard is loopback; elsewhere bind loopback only, and a
        # publisher that cannot is refused rather than bound on every interface
        bind = "127.0.0.1"
        if not binds_one_interface(live.release):
            if not inside():
                raise PublisherError(
                    f"vLLM {live.release.version}'s publisher binds every interface: it runs "
                    "only inside route-check's loopback-only network namespace"
                )
            bind = ALL_INTERFACES
        # the release's publisher adds its rank to both ports itself
        endpoint = f"tcp://*:{live.port}"
        replay = f"tcp://*:{live.replay_port}"
        # a restarted engine binds its predecessor's port, which its socket may hold a
        # moment after shutdown (its thread closes it): try again for a while
        deadline = time.monotonic() + REBIND_SECONDS
        while True:
            try:
                self.publisher = start_publisher(
                    live.release, endpoint, replay, "", rank=rank, bind=bind
                )
                break
            except PublisherError as exc:
                if "in use" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.prefixes: dict[tuple[int, ...], tuple[bytes, ...]] = {}
        #: Events in each batch it published, in sequence order (batch ``i`` is seq ``i``).
        self.batch_events: list[int] = []

    def step(self, action: RequestAction, block_size: int) -> tuple[ManagerResult, Events]:
        """Run ``action`` on the pool and publish the events it caused as one batch; the
        result and those events."""
        run = self.run
        result = run.apply(action)
        if isinstance(action, Admit) and action.request_id in run.state.requests:
            request = run.state.requests[action.request_id]
            note_prefix(
                self.prefixes, request.tokens, block_hashes(request, block_size), block_size
            )
        run.call(TakeEvents())
        observed = run.lockstep.last.actual
        assert isinstance(observed, Observation)
        events: Events = observed.result  # type: ignore[assignment]
        if events:
            batch = self.translator.batch(events, run.state.requests, time.time())
            self.publisher.publish(batch)
            self.batch_events.append(len(batch.events))
        return result, events

    def truth(self, tokens: tuple[int, ...], hashes: tuple[bytes, ...]) -> int:
        """The leading blocks of a prefix the pool serves: what a lookup on the spec's pool
        (in lockstep with the target's) hits."""
        return served_blocks(self.run.lockstep.state, hashes, 0)

    def shutdown(self) -> None:
        self.publisher.shutdown()


def note_prefix(
    prefixes: dict[tuple[int, ...], tuple[bytes, ...]],
    tokens: tuple[int, ...],
    hashes: tuple[bytes, ...],
    block_size: int,
) -> None:
    """Remember a prompt's whole blocks (most recent last): what the consumers are asked."""
    full = len(tokens) // block_size
    if full:
        prefix = tuple(tokens[: full * block_size])
        prefixes.pop(prefix, None)
        prefixes[prefix] = hashes[:full]


class _SglangRank:
    """One SGLang engine (:mod:`.sglang_stream`) as a rank of the scenario: its stream is
    SGLang's own, its truth SGLang's own tree, and only the indexer is asked (by tokens)."""

    def __init__(self, live: _Live, rank: int) -> None:
        if rank:
            raise ConsumerError(
                "SGLang's batches carry no data-parallel rank (0.4.6's KVEventBatch is "
                "[ts, events]): the data-parallel scenario runs on vLLM's streams only"
            )
        if not inside():
            raise PublisherError(
                "SGLang's publisher binds every interface: it runs only inside route-check's "
                "loopback-only network namespace"
            )
        s = live.setting
        self.rank = rank
        self.engine = SglangEngine(s.target, s.block_size, s.blocks, live.port)
        self.prefixes: dict[tuple[int, ...], tuple[bytes, ...]] = {}
        self.batch_events: list[int] = []

    def step(self, action: RequestAction, block_size: int) -> tuple[ManagerResult, Events]:
        result, kinds = self.engine.apply(action)
        if isinstance(action, Admit) and result is not None:
            note_prefix(self.prefixes, action.tokens, (), block_size)
        if kinds:
            self.batch_events.append(sum(kinds.values()))
        # the in-process consumers are not run on SGLang's stream: only the counts matter
        return result, tuple(_Published(kind) for kind, n in kinds.items() for _ in range(n))

    def truth(self, tokens: tuple[int, ...], hashes: tuple[bytes, ...]) -> int:
        return self.engine.held_blocks(tokens)

    def shutdown(self) -> None:
        self.engine.shutdown()


class _Live:
    """One scenario's moving parts: the engines, the consumers (one view per rank), the
    tallies."""

    def __init__(self, setting: Setting, ranks: int = 1) -> None:
        self.setting = setting
        self.sglang = is_sglang(setting.target)
        if self.sglang:
            others = [c for c in setting.consumers if c != INDEXER]
            if others:
                raise ConsumerError(
                    f"{', '.join(others)}: on SGLang's stream only {INDEXER} is asked "
                    f"({SGLANG_CONSUMERS})"
                )
        else:
            factory, _ = load_target(setting.target)
            self.factory = factory
            self.profile = get_profile(choose_profile(setting.target).name)
            self.release = load_publisher(setting.release)
        self.ranks = ranks
        self.port = free_ports(ranks)
        self.replay_port = free_ports(ranks)
        self.published: Counter[str] = Counter()
        self.indexer: IndexerProcess | None = None
        self.indexer_events = 0
        #: Seconds to wait for the indexer to take every event before asking it.
        self.patience = 3.0
        #: consumer -> its router (protocol 2), once it has joined
        self.consumers: dict[str, Router] = {}
        self.tallies = {name: Tally() for name in setting.consumers}
        self.rank_tallies = {
            name: [Tally() for _ in range(ranks)] for name in setting.consumers
        } if ranks > 1 else {}  # fmt: skip
        self.batches = 0
        #: Set by :meth:`restart`: the old publisher's batches, what the indexer had counted.
        self.old_batches: int | None = None
        self.counted_before = 0
        self.restarted: dict[str, int] = {}
        self.engines: list[_Engine | _SglangRank | None] = [None] * ranks
        for rank in range(ranks):
            self.new_engine(rank)
        self.serving = 0

    def new_engine(self, rank: int = 0) -> None:
        """A fresh pool and a new publisher of ``rank`` on the same loopback port."""
        old = self.engines[rank]
        if old is not None:
            old.shutdown()
        engine = _SglangRank(self, rank) if self.sglang else _Engine(self, rank)
        if old is not None:
            # the old pool's prompts are still asked about: the new pool holds none of them,
            # and a consumer that still claims them over-claims
            engine.prefixes.update(old.prefixes)
        self.engines[rank] = engine

    def restart(self) -> None:
        """Rank 0's engine restarts; what the indexer had counted of the old publisher's
        events, and how many batches it sent, are kept for :meth:`restart_counts`."""
        old = self.engine(0)
        if self.indexer is not None:
            self.indexer.wait_applied(self.indexer_events, self.patience)
            self.counted_before = sum(self.indexer.applied().values())
        self.old_batches = len(old.batch_events)
        self.new_engine(0)

    def restart_counts(self) -> dict[str, int]:
        """After a restart: the old publisher's batches (its sequence ended at that number
        less one), the events of the new publisher, how many of them sit in batches whose
        sequence is past the old one's last, and how many the indexer counted (its
        ``/metrics``, applied or dropped). Empty without a restart or an indexer."""
        if self.indexer is None or self.old_batches is None:
            return {}
        new = self.engine(0).batch_events
        return {
            "old_batches": self.old_batches,
            "new_batches": len(new),
            "new_events": sum(new),
            "new_events_past_old_sequence": sum(new[self.old_batches :]),
            "new_events_counted": sum(self.indexer.applied().values()) - self.counted_before,
        }

    def engine(self, rank: int) -> _Engine | _SglangRank:
        engine = self.engines[rank]
        assert engine is not None
        return engine

    def join(self) -> None:
        """The consumers start now: the in-process ones empty, the indexer subscribed."""
        for name in self.setting.consumers:
            router: Router = DynamoIndexer() if name == INDEXER else make_router(name)
            hook(router, "start", lambda wire: None)(self.wire())
            if feeds(router) == "wire" and not isinstance(router, DynamoIndexer):
                # its subscription reaches the publisher (ZMQ's slow joiner); the indexer
                # waits for its listeners itself
                time.sleep(JOIN_SECONDS)
            self.consumers[name] = router
            if isinstance(router, DynamoIndexer):
                self.indexer = router.process  # its /metrics: what it counted
            if ranks(router) == "one-worker":
                self.rank_tallies.pop(name, None)

    def wire(self) -> Wire:
        """Where the stream is published: each rank's publisher and replay endpoint."""
        return Wire(
            tuple(f"tcp://127.0.0.1:{self.port + r}" for r in range(self.ranks)),
            tuple(f"tcp://127.0.0.1:{self.replay_port + r}" for r in range(self.ranks)),
            self.setting.block_size,
        )

    def fed(self, name: str) -> str:
        """How consumer ``name`` was fed: in process, or off the wire."""
        router = self.consumers.get(name)
        return feeds(router) if router is not None else "process"

    def wait_watermarks(self) -> None:
        """Each router that reports its watermark, waited on until it has applied every
        rank's last batch (one that lags is waited for briefly from then on)."""
        for router in self.consumers.values():
            applied = getattr(router, "applied", None)
            if applied is None:
                continue
            wanted = {}
            for rank in range(self.ranks):
                engine = self.engines[rank]
                if engine is not None and engine.batch_events:
                    wanted[rank] = len(engine.batch_events) - 1
            deadline = time.monotonic() + self.patience
            while True:
                now = applied()
                if all(now.get(r, -1) >= seq for r, seq in wanted.items()):
                    break
                if time.monotonic() > deadline:
                    self.patience = 0.2
                    break
                time.sleep(0.01)

    def apply(self, action: RequestAction) -> ManagerResult:
        engine = self.engine(self.serving)
        result, events = engine.step(action, self.setting.block_size)
        if events:
            self.published.update(
                e.kind if isinstance(e, _Published) else type(e).__name__ for e in events
            )
            if self.indexer is not None:
                self.indexer_events += len(events)
            for router in self.consumers.values():
                if feeds(router) == "process":
                    router.apply(events, engine.rank)  # type: ignore[attr-defined]
            self.batches += 1
            if self.batches % self.setting.every == 0:
                self.check()
        return result

    def started(self, name: str) -> bool:
        """Whether consumer ``name`` has joined (not yet, before a late join)."""
        return name in self.consumers

    def claimed(self, name: str, rank: int, tokens: tuple[int, ...], hashes: Any) -> int:
        """The leading blocks of a prefix consumer ``name`` believes rank ``rank`` holds."""
        # one token past the whole blocks: a router that, as vLLM, never serves a
        # prompt's last token from cache still credits every whole block
        answer = self.consumers[name].credited(Prompt((*tokens, PAST_LAST), hashes))
        return int(answer.get(rank, 0))

    def check_worker(self, name: str) -> Check:
        """A router that takes the ranks for endpoints of one worker, asked once per
        prefix: the truth is the best rank's."""
        now = Check()
        for tokens, hashes in self.asked():
            truth = max(self.engine(r).truth(tokens, hashes) for r in range(self.ranks))
            now.add(truth, self.claimed(name, 0, tokens, hashes))
        return now

    def check_rank(self, name: str, rank: int) -> Check:
        """Consumer ``name`` asked about rank ``rank``'s most recent prompt prefixes."""
        engine = self.engine(rank)
        now = Check()
        for tokens, hashes in self.asked():
            now.add(engine.truth(tokens, hashes), self.claimed(name, rank, tokens, hashes))
        return now

    def asked(self) -> list[tuple[tuple[int, ...], tuple[bytes, ...]]]:
        """The prompt prefixes every rank is asked about: each rank's most recent ones, as a
        router scores every rank for a request before it routes it (a rank that never saw a
        prompt must answer 0 for it)."""
        asked: dict[tuple[int, ...], tuple[bytes, ...]] = {}
        for rank in range(self.ranks):
            asked.update(list(self.engine(rank).prefixes.items())[-ASKED:])
        return list(asked.items())

    def check(self) -> None:
        if not self.consumers:
            return
        # every event published since the indexer joined, taken; one that lags (it dropped
        # some without counting them) is waited for briefly from then on
        if self.indexer is not None and not self.indexer.wait_applied(
            self.indexer_events, self.patience
        ):
            self.patience = 0.2
        self.wait_watermarks()
        for name, tally in self.tallies.items():
            if not self.started(name):
                continue
            if name in self.consumers and ranks(self.consumers[name]) == "one-worker":
                tally.record(self.check_worker(name), self.batches)
                continue
            overall = Check()
            for rank in range(self.ranks):
                now = self.check_rank(name, rank)
                overall.merge(now)
                if name in self.rank_tallies:
                    self.rank_tallies[name][rank].record(now, self.batches)
            tally.record(overall, self.batches)

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
                self.indexer.wait_applied(self.indexer_events, self.patience)
                self.restarted = self.restart_counts()
                counts = {f"{k}/{s}": n for (k, s), n in self.indexer.applied().items() if n}
                counts.update((k, n) for k, n in self.indexer.warnings().items() if n)
            finally:
                self.indexer.stop()
        for router in self.consumers.values():
            hook(router, "close", lambda: None)()
        for engine in self.engines:
            if engine is not None:
                engine.shutdown()
        return counts


def run_scenario(name: str, setting: Setting) -> ScenarioResult:
    """One scenario of :data:`SCENARIOS`, start to end; the indexer always stopped."""
    started = time.monotonic()
    live = _Live(setting, DP_RANKS if name == "data-parallel" else 1)
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
                live.restart()
                time.sleep(0.5)  # the indexer's subscription reaches the new publisher
            elif name == "data-parallel":
                live.serving = 1
            # rank 1 serves the same prompts as rank 0 did (data-parallel ranks share their
            # system prompts): a router that mixes the ranks up claims them early on rank 1
            live.workload(setting.requests - half, setting.seed + (name != "data-parallel"))
        live.check()
    finally:
        indexer = live.close()
    return ScenarioResult(
        name,
        live.tallies,
        live.published,
        indexer,
        round(time.monotonic() - started, 1),
        live.rank_tallies,
        live.restarted,
        {name: live.fed(name) for name in setting.consumers},
    )


def run_scenarios(names: Sequence[str], setting: Setting) -> list[ScenarioResult]:
    return [run_scenario(n, replace(setting)) for n in names]
