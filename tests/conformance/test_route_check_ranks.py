"""route-check's data-parallel accounting: a router that keeps one index for both ranks
(a planted fault, written here as a plugin) claims on rank 1 the prompts rank 0 cached
before rank 1 has computed them, and the per-rank precision shows it; the spec's count
model, one view per rank, is exact on both."""

from __future__ import annotations

from typing import ClassVar

from docs_written_consumer import CountingRouter  # pytest puts this folder on sys.path
from kvpool.conformance.consumers.naming import parse_consumer
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
