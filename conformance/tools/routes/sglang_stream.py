"""SGLang's stream for route-check: the release's own scheduler and its own publisher.

The engine is ``sglang==X`` (a 0.4 release) as ``--target sglang==X,page=N --machine
engine`` runs it: the release's own ``Scheduler`` over its ``RadixCache`` and paged
allocator, at a page of the check's block size, built with ``enable_kv_cache_events``
(:class:`~kvpool.conformance.engines.sglang.driver_0_4.SglangScheduler04Driver`). The
workload is planned as on Dynamo's mocker (:mod:`.mocker_stream`): the spec's manager
answers the workload's request actions (:class:`~.planner.Planner`), and each prompt it
admits is sent to SGLang as one request that generates one token. SGLang's scheduler then
runs it to its end, deciding everything it decides in production: what the request hits
in the tree, what is evicted to make room, what is cached at the finish; the loop's idle
pass follows (its ``check_memory``). A reset the planner grants is SGLang's own
``flush_cache``, between requests. The workload's other actions (decode growth,
preemption, eviction by block id) are the planner's only: SGLang evicts by its own LRU.

The batches are the scheduler's own: its ``_publish_kv_events`` builds each
``KVEventBatch`` (in the prefill and decode stats, and in the idle pass) and hands it to
the release's own ``ZmqEventPublisher`` (``srt/disaggregation/kv_events.py``, the module
the scheduler was loaded with). That publisher binds ``tcp://*:PORT``, so it runs only in
route-check's loopback-only namespace.

The truth for a prompt is what SGLang's tree holds of it: the longest run of its leading
tokens along a path of the tree, in whole pages (the tree is read, never matched: SGLang's
``match_prefix`` splits nodes and would publish events). Consumers are asked by tokens
only: a prompt's block hashes cannot be computed without the tree's node boundaries, so
the in-process consumers have nothing to be asked with and only Dynamo's indexer (which
hashes tokens itself) is measured.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kvpool.spec import get_profile
from kvpool.spec.manager import Admit, ManagerResult, RequestAction, ResetCache, Scheduled

from ...engines.sglang.driver_0_4 import SglangScheduler04Driver
from ...engines.sglang.generations import is_0_5
from ...engines.sglang.loader import SglangUnavailable
from ...engines.sglang.scheduler_release_0_4 import SglangScheduler04, load_scheduler_release
from ...machines.engine.driver import EngineSetup, Sampled, Submission
from ...targets.errors import TargetUsageError
from ...targets.loading import choose_profile, described
from ..stream.publisher import PublisherError
from .planner import Planner

MODULE = "sglang.srt.disaggregation.kv_events"
#: Why only the indexer is asked on SGLang's stream.
SGLANG_CONSUMERS = (
    "a prompt's block hashes depend on SGLang's tree nodes; the indexer hashes tokens itself"
)
#: The token the model samples for each request (its one token, which ends it).
SAMPLED = 1


def is_sglang(target: str) -> bool:
    """Whether ``target`` names an SGLang release or tree (its stream is SGLang's)."""
    return described(target).engine == "sglang"


def load_sglang(target: str) -> SglangScheduler04:
    """The scheduler files of the 0.4 release ``target`` names, from the cache or the
    wheel; :class:`PublisherError` when it names another form or generation, or they
    cannot be loaded."""
    named = described(target)
    version = named.version or ""
    try:
        if not version or is_0_5(version):
            raise PublisherError(
                f"{target}: route-check runs SGLang's stream on a 0.4 release (sglang==0.4.x)"
            )
        release = load_scheduler_release(version)
    except (SglangUnavailable, TargetUsageError) as exc:
        raise PublisherError(f"SGLang {version}'s scheduler could not be loaded: {exc}") from None
    if not hasattr(release.modules.get(MODULE), "ZmqEventPublisher"):
        raise PublisherError(f"SGLang {version}'s kv_events.py has no ZmqEventPublisher")
    return release


def prefetch_sglang(target: str, block_size: int) -> None:
    """Fetch (or find cached) what :class:`SglangEngine` loads; :class:`PublisherError`
    when it cannot."""
    load_sglang(target)


class _Counted:
    """The release's publisher, the events of each batch it is handed counted by type."""

    def __init__(self, publisher: Any) -> None:
        self.publisher = publisher
        self.batches: list[dict[str, int]] = []

    def publish(self, batch: Any) -> None:
        self.batches.append(dict(Counter(type(e).__name__ for e in batch.events)))
        self.publisher.publish(batch)

    def taken(self) -> list[dict[str, int]]:
        """The counts of the batches published since the last call."""
        batches, self.batches = self.batches, []
        return batches


class SglangEngine:
    """One SGLang scheduler, sent each prompt the workload's planner admits, publishing by
    its own publisher."""

    def __init__(self, target: str, block_size: int, blocks: int, port: int) -> None:
        release = load_sglang(target)
        self.block_size = block_size
        self.planner = Planner(block_size, blocks, get_profile(choose_profile(target).name))
        with release.active():
            publisher = release.modules[MODULE].ZmqEventPublisher(endpoint=f"tcp://*:{port}")
        self.publisher = _Counted(publisher)
        try:
            setup = EngineSetup(
                blocks,
                block_size,
                max_batch_tokens=(blocks - 1) * block_size,
                max_batch_size=1,
                enable_kv_cache_events=True,
            )
            self.driver = SglangScheduler04Driver(release, setup, target, self.publisher)
        except BaseException:
            publisher.shutdown()
            raise

    def apply(self, action: RequestAction) -> tuple[ManagerResult, list[dict[str, int]]]:
        """Plan ``action``; an admitted prompt is run by SGLang's scheduler, a granted
        reset is its flush. The result, and the events of each batch SGLang published, by
        type."""
        result = self.planner.apply(action)
        if isinstance(action, Admit) and isinstance(result, Scheduled):
            self._serve(action)
        elif isinstance(action, ResetCache) and result is True:
            if not self.driver.flush():
                raise PublisherError("SGLang refused to flush its cache with no request running")
            self._idle()
        return result, self.publisher.taken()

    def _serve(self, admitted: Admit) -> None:
        """SGLang's loop passes until ``admitted`` has its one token and the loop is idle."""
        d, rid, length = self.driver, admitted.request_id, len(admitted.tokens)
        d.submit(Submission(rid, admitted.tokens, None, 1))
        for _ in range(length + 2):  # a pass per prompt chunk, at most
            batch = d.step()
            if not batch.scheduled:
                return  # the idle pass
            ends = [r for r in batch.scheduled if r.start + r.num_tokens >= length]
            d.report([Sampled(r.request_id, SAMPLED, True) for r in ends])
        raise PublisherError(f"SGLang did not finish request {rid} ({length} tokens)")

    def _idle(self) -> None:
        if self.driver.step().scheduled:
            raise PublisherError("SGLang planned a batch with no request waiting")

    def held_blocks(self, tokens: tuple[int, ...]) -> int:
        """How many leading blocks of ``tokens`` the tree holds: the longest common start
        of ``tokens`` with a path from the root, in whole pages."""
        held = 0
        stack: list[tuple[Any, int]] = [(self.driver.scheduler.tree_cache.root_node, 0)]
        while stack:
            node, depth = stack.pop()
            for child in node.children.values():
                key = [int(t) for t in child.key]
                same = 0
                while same < len(key) and depth + same < len(tokens):
                    if key[same] != tokens[depth + same]:
                        break
                    same += 1
                held = max(held, depth + same)
                if same == len(key):
                    stack.append((child, depth + same))
        return held // self.block_size

    def shutdown(self) -> None:
        self.publisher.publisher.shutdown()
