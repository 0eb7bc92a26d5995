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
same address, its sequence from 0; the consumers keep running, and a router's watermark
counts for the new publisher only once it has left the old one's) and ``data-parallel`` (two
ranks, each its own pool and its release's publisher with its ``data_parallel_rank``, which
the publisher writes into every batch and adds to its port; every consumer keeps one view
per rank, and is compared rank by rank, with the best rank, or, for a router that picks a
rank per prompt, with the rank it picked and the best, as its ``ranks`` hook declares;
the indexer is told one listener per rank of worker 1). Each check's own recall
and precision are kept, in order (:mod:`.tally`): the curve over the run.

The consumers are started once per run (:class:`Routers`), on publisher and replay ports
the run holds for every scenario (each scenario's engines bind them anew, as a restarted
engine does), and closed at its end. Between two scenarios each is emptied as it declares
(its ``resets`` hook): ``clear``, an ``AllBlocksCleared`` published at the end of the
scenario on every rank's stream (or applied, in process), waited on through its
watermark; ``new-worker``, closed and started again. A late join is a start: the
consumers that read the wire are closed when the late-join scenario begins and started at
its half, and those fed in process are fed from its half on.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvpool.spec import Observation, PoolConfig, TakeEvents, get_profile
from kvpool.spec.consumer import served_blocks
from kvpool.spec.events import AllBlocksCleared
from kvpool.spec.manager import ManagerConfig, ManagerResult, RequestAction, ResetCache
from kvpool.spec.manager.actions import Admit
from kvpool.spec.manager.state import block_hashes

from ...consumers.naming import make_router
from ...consumers.protocol import ConsumerError
from ...consumers.router import Prompt, Router, Wire, feeds, hook, ranks, resets
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
from .mocker_stream import MOCKER_CONSUMERS, NOT_ON_MOCKER, MockerEngine, is_mocker
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
#: How long a router is given, past the scenario's patience, to apply the clear that
#: empties it between scenarios.
CLEAR_SECONDS = 3.0


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
        live.routers.let_go(rank)
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

    def clear(self) -> int:
        """An ``AllBlocksCleared`` published as one batch (not the pool's: the consumers
        emptied between scenarios); its sequence number."""
        batch = self.translator.batch((AllBlocksCleared(),), self.run.state.requests, time.time())
        self.publisher.publish(batch)
        self.batch_events.append(len(batch.events))
        return len(self.batch_events) - 1

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


class _OwnStreamRank:
    """An engine that publishes its own stream as the scenario's only rank (SGLang's, Dynamo's
    mocker): it runs inside route-check's loopback-only namespace (it binds every interface),
    only the indexer is asked (by tokens), and the in-process consumers are not run on it
    (only its event counts matter). Subclasses start the engine and say what it holds."""

    #: How errors name the stream.
    name = ""
    #: Why the data-parallel scenario cannot run on it.
    no_ranks = ""

    def __init__(self, live: _Live, rank: int) -> None:
        if rank:
            raise ConsumerError(self.no_ranks)
        if not inside():
            raise PublisherError(
                f"{self.name} binds every interface: it runs only inside route-check's "
                "loopback-only network namespace"
            )
        self.rank = rank
        live.routers.let_go(rank)
        self.prefixes: dict[tuple[int, ...], tuple[bytes, ...]] = {}
        self.batch_events: list[int] = []

    def clear(self) -> int:
        raise ConsumerError(
            f"on {self.name}'s stream only {INDEXER} is asked, and it is started anew per scenario"
        )

    def published(self, batches: list[dict[str, int]]) -> Events:
        """The events of ``batches`` (each a count per kind), noted per batch."""
        self.batch_events += [sum(kinds.values()) for kinds in batches]
        return tuple(_Published(k) for kinds in batches for k, n in kinds.items() for _ in range(n))


class _SglangRank(_OwnStreamRank):
    """One SGLang engine (:mod:`.sglang_stream`) as a rank of the scenario: its truth is
    SGLang's own tree."""

    name = "SGLang's publisher"
    no_ranks = (
        "SGLang's batches carry no data-parallel rank (0.4.6's KVEventBatch is "
        "[ts, events]): the data-parallel scenario runs on vLLM's streams only"
    )

    def __init__(self, live: _Live, rank: int) -> None:
        super().__init__(live, rank)
        s = live.setting
        self.engine = SglangEngine(s.target, s.block_size, s.blocks, live.port)

    def step(self, action: RequestAction, block_size: int) -> tuple[ManagerResult, Events]:
        result, batches = self.engine.apply(action)
        if isinstance(action, Admit) and result is not None:
            note_prefix(self.prefixes, action.tokens, (), block_size)
        return result, self.published(batches)

    def truth(self, tokens: tuple[int, ...], hashes: tuple[bytes, ...]) -> int:
        return self.engine.held_blocks(tokens)

    def shutdown(self) -> None:
        self.engine.shutdown()


class _MockerRank(_OwnStreamRank):
    """Dynamo's mocker (:mod:`.mocker_stream`) as a rank of the scenario: its truth is the
    spec's replay of the prompts it ran."""

    name = "Dynamo's mocker"
    no_ranks = f"data-parallel: {NOT_ON_MOCKER['data-parallel']}"

    def __init__(self, live: _Live, rank: int) -> None:
        super().__init__(live, rank)
        s = live.setting
        self.engine = MockerEngine(s.block_size, s.blocks, live.port, live.replay_port)

    def step(self, action: RequestAction, block_size: int) -> tuple[ManagerResult, Events]:
        result, hashes, batches = self.engine.apply(action)
        if isinstance(action, Admit) and hashes is not None:
            note_prefix(self.prefixes, action.tokens, hashes, block_size)
        return result, self.published(batches)

    def truth(self, tokens: tuple[int, ...], hashes: tuple[bytes, ...]) -> int:
        return self.engine.held_blocks(hashes)

    def shutdown(self) -> None:
        self.engine.shutdown()


class _Live:
    """One scenario's moving parts: the engines, the consumers (one view per rank), the
    tallies."""

    def __init__(self, setting: Setting, routers: Routers, ranks: int = 1) -> None:
        self.setting = setting
        self.routers = routers
        self.mocker = is_mocker(setting.target)
        self.sglang = not self.mocker and is_sglang(setting.target)
        if self.sglang or self.mocker:
            others = [c for c in setting.consumers if c != INDEXER]
            if others:
                stream, why = (
                    ("SGLang's", SGLANG_CONSUMERS)
                    if self.sglang
                    else ("the mocker's", MOCKER_CONSUMERS)
                )
                raise ConsumerError(
                    f"{', '.join(others)}: on {stream} stream only {INDEXER} is asked ({why})"
                )
        else:
            factory, _ = load_target(setting.target)
            self.factory = factory
            self.profile = get_profile(choose_profile(setting.target).name)
            self.release = load_publisher(setting.release)
        self.ranks = ranks
        self.port = routers.port
        self.replay_port = routers.replay_port
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
        self.engines: list[_Engine | _SglangRank | _MockerRank | None] = [None] * ranks
        for rank in range(ranks):
            self.new_engine(rank)
        self.serving = 0
        #: Whether this scenario's engines have bound the run's ports since the consumers
        #: last joined (a router that reads the wire then rejoins its publishers).
        self.engines_bound = True
        #: Per consumer kept from the last scenario, the watermark it showed at the join,
        #: per rank: the new publishers count from 0 again, so a rank's watermark counts
        #: only once it has moved from there (:meth:`wait_watermarks`).
        self.stale: dict[str, dict[int, int]] = {}

    def new_engine(self, rank: int = 0) -> None:
        """A fresh pool and a new publisher of ``rank`` on the same loopback port."""
        old = self.engines[rank]
        if old is not None:
            old.shutdown()
        engine: _Engine | _SglangRank | _MockerRank
        if self.sglang:
            engine = _SglangRank(self, rank)
        elif self.mocker:
            engine = _MockerRank(self, rank)
        else:
            engine = _Engine(self, rank)
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
        # the new publisher counts from 0 again: a router's watermark for rank 0 is the old
        # publisher's until it has taken the new one's first batch
        self.wait_watermarks()
        self.keep_stale(0)
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

    def engine(self, rank: int) -> _Engine | _SglangRank | _MockerRank:
        engine = self.engines[rank]
        assert engine is not None
        return engine

    def join(self) -> None:
        """The consumers join now: each started (once per run) or emptied as it declares;
        the indexer subscribed."""
        for name in self.setting.consumers:
            router, reused = self.routers.join(name, self.engines_bound)
            self.consumers[name] = router
            if reused:
                for rank in range(self.ranks):
                    self.keep_stale(rank, name)
            if isinstance(router, DynamoIndexer):
                self.indexer = router.process  # its /metrics: what it counted
            if ranks(router) != "per-rank":
                self.rank_tallies.pop(name, None)
        self.engines_bound = False

    def fed(self, name: str) -> str:
        """How consumer ``name`` was fed: in process, or off the wire."""
        router = self.consumers.get(name)
        return feeds(router) if router is not None else "process"

    def wait_watermarks(self) -> None:
        """Each router that reports its watermark, waited on until it has applied every
        rank's last batch (one that lags is waited for briefly from then on)."""
        for name, router in self.consumers.items():
            applied = getattr(router, "applied", None)
            if applied is None:
                continue
            wanted = {}
            for rank in range(self.ranks):
                engine = self.engines[rank]
                if engine is not None and engine.batch_events:
                    wanted[rank] = len(engine.batch_events) - 1
            deadline = time.monotonic() + self.patience
            while not self.caught_up(name, applied(), wanted):
                if time.monotonic() > deadline:
                    self.patience = 0.2
                    break
                time.sleep(0.01)

    def keep_stale(self, rank: int, only: str | None = None) -> None:
        """Rank ``rank`` gets a new publisher, whose sequence starts again from 0: the
        watermark each router (or router ``only``) shows for it now is the old publisher's,
        kept until it moves (:meth:`caught_up`)."""
        for name, router in self.consumers.items():
            applied = getattr(router, "applied", None)
            if applied is None or only not in (None, name):
                continue
            now = applied()
            if rank in now:
                self.stale.setdefault(name, {})[rank] = now[rank]

    def caught_up(self, name: str, now: Mapping[int, int], wanted: Mapping[int, int]) -> bool:
        """Whether router ``name``, whose watermark is ``now``, has applied batch
        ``wanted[rank]`` of every rank's current publisher: a rank whose watermark is still
        the one kept from its old publisher (:meth:`keep_stale`) has not (no old batch
        moves it from there)."""
        stale = self.stale.get(name, {})
        for rank in [r for r in stale if now.get(r, -1) != stale[r]]:
            del stale[rank]  # it has moved: the new publisher's sequence
        return all(r not in stale and now.get(r, -1) >= seq for r, seq in wanted.items())

    def settle(self, rank: int) -> None:
        """Rank ``rank`` has just published a batch: each router whose watermark for it is
        still kept from an old publisher is waited on until it moves. Right after the new
        publisher's first batch the watermark is either the old one or that batch's
        sequence, so the wait is exact; a later check could not tell the new sequence from
        the old one when they meet (a first batch whose sequence equals the kept one is
        left to the checks)."""
        seq = len(self.engine(rank).batch_events) - 1
        for name, stale in self.stale.items():
            if stale.get(rank, seq) == seq:
                continue
            applied = self.consumers[name].applied  # type: ignore[attr-defined]
            deadline = time.monotonic() + self.patience
            while not self.caught_up(name, applied(), {rank: seq}):
                if time.monotonic() > deadline:
                    break  # left kept: the check waits on it, then lowers its patience
                time.sleep(0.002)

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
            self.settle(engine.rank)
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

    def check_pick(self, name: str) -> Check:
        """A router that picks one rank per prefix, asked once per prefix: its credit is
        compared with the picked rank's blocks (a rank the scenario does not run holds
        none) for what it over-claims, and with the best rank's for what it misses."""
        now = Check()
        for tokens, hashes in self.asked():
            truths = [self.engine(r).truth(tokens, hashes) for r in range(self.ranks)]
            rank, credit = picked(
                self.consumers[name].credited(Prompt((*tokens, PAST_LAST), hashes))
            )
            now.add_pick(max(truths), truths[rank] if rank < self.ranks else 0, credit)
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
            handling = ranks(self.consumers[name]) if name in self.consumers else "per-rank"
            if handling == "one-worker":
                tally.record(self.check_worker(name), self.batches)
                continue
            if handling == "picks-rank":
                tally.record(self.check_pick(name), self.batches)
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
        try:
            self.routers.reset(self)
        finally:
            for engine in self.engines:
                if engine is not None:
                    engine.shutdown()
        return counts


def picked(answer: Mapping[int, int]) -> tuple[int, int]:
    """The rank a ``picks-rank`` router picked and its credit there: the rank it credits
    most (the lowest of a tie; rank 0 and no credit when it names none)."""
    credited = [(int(blocks), -int(rank)) for rank, blocks in answer.items() if int(rank) >= 0]
    if not credited:
        return 0, 0
    blocks, rank = max(credited)
    return -rank, blocks


class Routers:
    """The consumers of one run, each started once, on the run's publisher and replay
    ports (``ranks`` of each: every scenario's ranks), and closed by :meth:`close`."""

    def __init__(self, setting: Setting, ranks: int = 1) -> None:
        self.setting = setting
        self.ranks = ranks
        self.port = free_ports(ranks)
        self.replay_port = free_ports(ranks)
        self.started: dict[str, Router] = {}
        #: The run's ports no engine has bound yet, held by a bound socket so that no
        #: other process is given them meanwhile (a rank's ports wait for the
        #: data-parallel scenario); let go of by :meth:`let_go` just before a bind.
        self.held: dict[int, socket.socket] = {}
        for rank in range(ranks):
            for port in (self.port + rank, self.replay_port + rank):
                self.held[port] = hold(port)

    def let_go(self, rank: int) -> None:
        """Rank ``rank``'s ports, let go of for its engine's publisher to bind."""
        for port in (self.port + rank, self.replay_port + rank):
            held = self.held.pop(port, None)
            if held is not None:
                held.close()

    def wire(self) -> Wire:
        """Where the stream is published: each rank's publisher and replay endpoint."""
        return Wire(
            tuple(f"tcp://127.0.0.1:{self.port + r}" for r in range(self.ranks)),
            tuple(f"tcp://127.0.0.1:{self.replay_port + r}" for r in range(self.ranks)),
            self.setting.block_size,
        )

    def _start(self, name: str) -> Router:
        router: Router = DynamoIndexer() if name == INDEXER else make_router(name)
        self.started[name] = router
        hook(router, "start", lambda wire: None)(self.wire())
        if feeds(router) == "wire" and not isinstance(router, DynamoIndexer):
            # its subscription reaches the publisher (ZMQ's slow joiner); the indexer
            # waits for its listeners itself
            time.sleep(JOIN_SECONDS)
        return router

    def _stop(self, name: str) -> None:
        router = self.started.pop(name, None)
        if router is not None:
            hook(router, "close", lambda: None)()

    def join(self, name: str, rebound: bool) -> tuple[Router, bool]:
        """Consumer ``name`` for a scenario, and whether it ran already: started if it is
        not running, else as it is (emptied at the end of the last scenario); one that
        reads the wire is given time to rejoin when the scenario's engines have bound the
        ports anew (``rebound``)."""
        router = self.started.get(name)
        if router is None:
            return self._start(name), False
        if rebound and feeds(router) == "wire":
            time.sleep(JOIN_SECONDS)  # its sockets reconnect to the new publishers
        return router, True

    def leave_wire(self) -> None:
        """A late join begins: the consumers that read the wire are closed (started again
        when they join)."""
        for name in list(self.started):
            if feeds(self.started[name]) == "wire":
                self._stop(name)

    def reset(self, live: _Live) -> None:
        """The end of ``live``'s scenario: each consumer emptied as it declares, on the
        scenario's own streams (a cleared one must have applied the clear)."""
        cleared = [name for name, r in self.started.items() if resets(r) == "clear"]
        for name in [n for n in self.started if n not in cleared]:
            self._stop(name)  # new-worker: started again at the next scenario's join
        waited: dict[int, int] = {}
        for rank, engine in enumerate(live.engines):
            if engine is None or not cleared:
                continue
            for name in cleared:
                if feeds(self.started[name]) == "process":
                    self.started[name].apply([AllBlocksCleared()], rank)  # type: ignore[attr-defined]
            if any(feeds(self.started[n]) == "wire" for n in cleared):
                waited[rank] = engine.clear()
        for name in cleared:
            applied = getattr(self.started[name], "applied", None)
            if applied is None or not waited:
                continue
            deadline = time.monotonic() + live.patience + CLEAR_SECONDS
            while not live.caught_up(name, applied(), waited):
                if time.monotonic() > deadline:
                    self._stop(name)  # it cannot be shown empty: started anew instead
                    break
                time.sleep(0.01)

    def close(self) -> None:
        for rank in range(self.ranks):
            self.let_go(rank)
        for name in list(self.started):
            self._stop(name)


def hold(port: int) -> socket.socket:
    """A socket bound to ``port`` on loopback (not listening): the port kept from others."""
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", port))
    except OSError as exc:
        held.close()
        raise ConsumerError(f"port {port} on loopback was taken before it could be held") from exc
    return held


def run_scenario(name: str, setting: Setting, routers: Routers | None = None) -> ScenarioResult:
    """One scenario of :data:`SCENARIOS`, start to end, with the run's ``routers`` (its
    own, closed at its end, when none is given); the indexer always stopped."""
    if routers is None:
        own = Routers(setting, DP_RANKS if name == "data-parallel" else 1)
        try:
            return run_scenario(name, setting, own)
        finally:
            own.close()
    started = time.monotonic()
    live = _Live(setting, routers, DP_RANKS if name == "data-parallel" else 1)
    half = max(1, setting.requests // 2)
    indexer: dict[str, int] = {}
    try:
        if name != "late-join":
            live.join()
        else:
            routers.leave_wire()
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
    """The scenarios ``names`` in order, their consumers started once for them all."""
    routers = Routers(setting, DP_RANKS if "data-parallel" in names else 1)
    try:
        return [run_scenario(n, replace(setting), routers) for n in names]
    finally:
        routers.close()
