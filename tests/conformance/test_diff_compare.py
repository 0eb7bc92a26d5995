"""Each comparison ``kvpool diff`` makes between two pools catches a planted difference, and
a renaming of interchangeable blocks (safety) is read through, not reported."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from kvpool.conformance.engines.builtin.spec_target import SpecTarget
from kvpool.conformance.machines.pool.levels import ORDER
from kvpool.conformance.machines.pool.target import PoolView
from kvpool.conformance.tools.diff.compare import compare_results, compare_views
from kvpool.conformance.tools.diff.loading import load_pair
from kvpool.conformance.tools.diff.pair import Difference, PairRun
from kvpool.conformance.tools.diff.renaming import Renaming
from kvpool.spec import (
    BlockRemoved,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetUsage,
    Observation,
    PoolConfig,
    Profile,
    TakeEvents,
    UnpinBlocks,
)

EVERYTHING = frozenset({"free_queue", "ref_cnt", "keys", "events", "watchers", "peer"})
K1, K2 = b"\x01" * 8, b"\x02" * 8
SAME = PoolView(
    free_count=2,
    free_queue=(1, 2),
    ref_cnt=(0, 0, 0, 1),
    keys=(frozenset(), frozenset({K1}), frozenset(), frozenset()),
    primary=(None, K1, None, None),
)


def identity(order: bool = True) -> Renaming:
    return Renaming(4, fixed=order)


@pytest.mark.parametrize(
    ("b", "expected"),
    [
        (replace(SAME, free_count=3), "free count: A 2, B 3"),
        (replace(SAME, free_queue=(2, 1)), "free queue order: A [1, 2], B [2, 1]"),
        (replace(SAME, ref_cnt=(0, 0, 0, 2)), "ref_cnt of block 3: A 1, B 2"),
        (
            replace(SAME, keys=(frozenset(), frozenset({K2}), frozenset(), frozenset())),
            "keys of block 1: A [0101010101010101], B [0202020202020202]",
        ),
        (
            replace(SAME, primary=(None, K2, None, None)),
            "primary key of block 1: A 0101010101010101, B 0202020202020202",
        ),
        (replace(SAME, peer=PoolView(1, (2,))), None),  # only one side shows a peer
    ],
)
def test_each_view_difference_is_reported(b: PoolView, expected: str | None) -> None:
    assert compare_views(SAME, SAME, identity(), exact_order=True) == []
    problems = compare_views(SAME, b, identity(), exact_order=True, peer=identity())
    assert problems == ([expected] if expected else [])


def test_peer_pools_are_compared_when_both_show_one() -> None:
    a = replace(SAME, peer=PoolView(1, (2,)))
    b = replace(SAME, peer=PoolView(1, (1,)))
    problems = compare_views(a, b, identity(), exact_order=False, peer=Renaming(3, fixed=True))
    assert problems == [
        "peer pool: free blocks differ: free only in A [2], free only in B [1] (A's ids)"
    ]


def test_safety_reads_b_through_the_renaming() -> None:
    renaming = identity(order=False)
    state = SpecTarget(PoolConfig(4), Profile("p", "")).state
    assert renaming.match(state, (1,), (3,)) is None  # both free and unkeyed: renamed
    assert renaming.to_b(1) == 3 and renaming.to_a(3) == 1
    b = PoolView(
        free_count=2,
        free_queue=(2, 1),
        ref_cnt=(0, 0, 0, 1),
        keys=(frozenset(), frozenset(), frozenset(), frozenset({K1})),
        primary=(None, None, None, K1),
    )
    a = replace(SAME, free_queue=(3, 2), ref_cnt=(0, 1, 0, 0))
    assert compare_views(a, b, renaming, exact_order=False) == []
    assert compare_views(a, b, renaming, exact_order=True) == [
        "free queue order: A [3, 2], B [2, 1] (A's [2, 3])"
    ]


def test_each_result_difference_is_reported() -> None:
    order = identity()
    cases = [
        (GetNewBlocks(1), (1,), (2,), "get_new_blocks: results differ: A blocks [1], B blocks [2]"),
        (
            GetCachedBlock(K1, (0,)),
            (1,),
            None,
            "get_cached_block: results differ: A blocks [1], B None",
        ),
        (GetUsage(), 0.25, 0.5, "get_usage: results differ: A 0.25, B 0.5"),
        (
            TakeEvents(),
            (BlockRemoved(K1, 0),),
            (),
            "take_events: events differ: A [BlockRemoved(block_hash=01010101, group_id=0)], B []",
        ),
    ]
    for action, got_a, got_b, expected in cases:
        same = compare_results(
            action, Observation(got_a), Observation(got_a), EVERYTHING, order, order
        )
        assert same == []
        problems = compare_results(
            action, Observation(got_a), Observation(got_b), EVERYTHING, order, order
        )
        assert problems == [expected]
    fired = compare_results(
        UnpinBlocks((1,), "w1"),
        Observation(None, ((1, "w1"),)),
        Observation(None, ()),
        EVERYTHING,
        order,
        order,
    )
    assert fired == ["unpin_blocks: reuse watchers fired: A [(1, 'w1')], B []"]
    unseen = compare_results(
        TakeEvents(),
        Observation((BlockRemoved(K1, 0),)),
        Observation(()),
        frozenset(),
        order,
        order,
    )
    assert unseen == []  # events are compared only when both pools show them


class CorruptsItsFreeList(SpecTarget):
    """The spec, reporting a broken free list after its first free."""

    name = "corrupt"
    freed = False

    def apply(self, action: object) -> Observation:
        self.freed = self.freed or isinstance(action, FreeBlocks)
        return super().apply(action)  # type: ignore[arg-type]

    def structure_problems(self) -> list[str]:
        return ["block 1's next link points at itself"] if self.freed else []


def corrupt(config: PoolConfig, profile: Profile) -> SpecTarget:
    return CorruptsItsFreeList(config, profile)


def test_a_free_list_broken_on_one_side_only_is_a_difference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    pair = load_pair("spec", f"{__name__}:corrupt")
    run = PairRun(pair, ORDER, PoolConfig(3))
    run.apply(GetNewBlocks(1))
    with pytest.raises(Difference, match="after free_blocks: free list of B only corrupted"):
        run.apply(FreeBlocks((1,)))
    both = PairRun(load_pair(f"{__name__}:corrupt", f"{__name__}:corrupt"), ORDER, PoolConfig(3))
    both.apply(GetNewBlocks(1))
    both.apply(FreeBlocks((1,)))  # the same breakage on both sides is no difference
