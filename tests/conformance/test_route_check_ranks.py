"""route-check's data-parallel accounting: a router that keeps one index for both ranks
(a planted fault, written here as a plugin) claims on rank 1 the prompts rank 0 cached
before rank 1 has computed them, and the per-rank precision shows it; the spec's count
model, one view per rank, is exact on both. A router that picks one rank per prompt (``ranks =
"picks-rank"``) is judged on the rank it picked: one that names the wrong rank over-claims;
one that takes the ranks for one worker (``"one-worker"``) is judged on the best rank: one
that adds the ranks' blocks up over-claims."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from docs_written_consumer import CountingRouter  # pytest puts this folder on sys.path
from kvpool.conformance.consumers.naming import parse_consumer
from kvpool.conformance.consumers.router import Prompt, Wire
from kvpool.conformance.tools.routes.scenarios import Setting, run_scenario


class _MergedRanks(CountingRouter):
    """Every rank's view is one shared index: the ranks are mixed up."""

    name = "merged-ranks"
    shared: ClassVar[dict[tuple[int, bytes], int]] = {}

    def __init__(self) -> None:
        super().__init__()
        self.copies = _MergedRanks.shared


def make_merged_router() -> _MergedRanks:
    return _MergedRanks()


def test_a_router_that_mixes_the_ranks_up_is_caught_per_rank() -> None:
    _MergedRanks.shared.clear()
    planted = "test_route_check_ranks:make_merged_router"
    parse_consumer(planted)  # named as on the command line: the plugin is loaded
    setting = Setting("vllm==0.33.0", "0.33.0", ("count", planted), requests=12)
    result = run_scenario("data-parallel", setting)
    count, merged = result.ranks["count"], result.ranks[planted]
    assert all(t.held == t.found == t.claimed and t.held > 0 for t in count)
    assert merged[0].precision == 1.0  # rank 0 served first: nothing to mix up yet
    assert merged[1].precision < 1.0, merged[1]  # rank 1 claimed rank 0's blocks early
    assert min(p.precision for p in merged[1].over_time) < 1.0


class _PicksRank:
    """A router that picks one rank per prompt, as a router routes a request: the rank
    whose view holds most of it (the lowest of a tie), credited alone."""

    name = "picks-rank"
    protocol = 2
    feeds = "process"
    ranks = "picks-rank"

    def start(self, wire: Wire) -> None:
        self.views = [CountingRouter() for _ in range(wire.ranks)]

    def apply(self, events: Sequence[object], rank: int) -> None:
        self.views[rank].apply(events)

    def credited(self, prompt: Prompt) -> dict[int, int]:
        held = [view.held_blocks(prompt.block_hashes, 0) for view in self.views]
        best = max(held)
        return {held.index(best): best}


class _NamesTheOtherRank(_PicksRank):
    """Planted: the best credit, given to rank 1 whichever rank holds it."""

    def credited(self, prompt: Prompt) -> dict[int, int]:
        return {1: max(super().credited(prompt).values())}


class _OneWorker(_PicksRank):
    """The ranks as endpoints of one worker: the best rank's blocks, credited to the worker."""

    ranks = "one-worker"

    def credited(self, prompt: Prompt) -> dict[int, int]:
        return {0: max(super().credited(prompt).values())}


class _AddsTheRanks(_OneWorker):
    """Planted: every rank's blocks added up, as if the worker held them all."""

    def credited(self, prompt: Prompt) -> dict[int, int]:
        return {0: sum(view.held_blocks(prompt.block_hashes, 0) for view in self.views)}


def make_one_worker() -> _OneWorker:
    return _OneWorker()


def make_adds_the_ranks() -> _AddsTheRanks:
    return _AddsTheRanks()


def make_picks_rank() -> _PicksRank:
    return _PicksRank()


def make_names_the_other_rank() -> _NamesTheOtherRank:
    return _NamesTheOtherRank()


def test_a_router_that_picks_a_rank_or_takes_one_worker_is_judged_as_it_declares() -> None:
    names = (
        "make_picks_rank",
        "make_names_the_other_rank",
        "make_one_worker",
        "make_adds_the_ranks",
    )
    plugins = tuple(f"test_route_check_ranks:{name}" for name in names)
    for plugin in plugins:
        parse_consumer(plugin)
    result = run_scenario("data-parallel", Setting("vllm==0.33.0", "0.33.0", plugins, requests=12))
    assert not set(plugins) & set(result.ranks)  # one credit per prompt, no rank table
    picks, other_rank, one_worker, adds = (result.tallies[p] for p in plugins)
    for exact in (picks, one_worker):
        assert exact.held > 0 and exact.held == exact.found == exact.claimed
    assert other_rank.held == picks.held and other_rank.claimed == picks.claimed
    assert other_rank.found < other_rank.claimed  # rank 0's blocks credited to rank 1
    assert adds.held == one_worker.held and adds.found == one_worker.found
    assert adds.claimed > adds.found  # both ranks' copies of a prompt added up
