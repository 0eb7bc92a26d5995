"""Each request-level property check passes on good data and names the fault on bad data."""

from __future__ import annotations

from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.keys import make_key
from kvpool.spec.manager import PROPERTIES, BlockData, KVGroup
from kvpool.spec.manager import properties as props

FULL, SLIDING = KVGroup(), KVGroup(sliding_window_blocks=1)


def names(broken: list[props.Broken]) -> set[str]:
    assert all(b.property in PROPERTIES for b in broken)
    return {b.property for b in broken}


def test_a_full_attention_table_may_only_grow() -> None:
    assert not props.table_growth("r", [FULL], ((1, 2),), ((1, 2, 3),))
    broken = props.table_growth("r", [FULL], ((1, 2),), ((1, 4, 3),))
    assert names(broken) == {"append-only"} and broken[0].block == 2
    assert names(props.table_growth("r", [FULL], ((1, 2),), ((1,),))) == {"append-only"}
    assert names(props.table_growth("r", [FULL], ((1, 2),), ((0, 2),))) == {"append-only"}


def test_a_sliding_table_may_also_null_entries_but_nothing_else() -> None:
    assert not props.table_growth("r", [SLIDING], ((1, 2),), ((0, 2, 3),))
    broken = props.table_growth("r", [SLIDING], ((1, 2),), ((5, 2, 3),))
    assert names(broken) == {"append-only-up-to-null"}


def test_the_write_guard_refuses_shared_keyed_and_null_blocks() -> None:
    assert not props.write_guard("r", 3, 1, frozenset(), "write")
    for block, ref, keys in ((3, 2, frozenset()), (3, 1, frozenset({b"k"})), (0, 1, frozenset())):
        broken = props.write_guard("r", block, ref, keys, "write")
        assert names(broken) == {"write-guard"} and broken[0].block == block


def test_hit_keys_need_the_requests_own_salted_key() -> None:
    hashes = request_block_hashes((1, 2, 3, 4), 1, ("s",))
    own = make_key(hashes[1], 0)
    keys = {5: frozenset({own})}
    assert not props.hit_keys("r", ((5,),), 2, hashes, 1, 2, lambda b: keys.get(b, frozenset()))
    unsalted = make_key(request_block_hashes((1, 2, 3, 4), 1)[1], 0)
    keys = {5: frozenset({unsalted})}
    broken = props.hit_keys("r", ((5,),), 2, hashes, 1, 2, lambda b: keys.get(b, frozenset()))
    assert names(broken) == {"hit-keys"} and broken[0].block == 5


def test_own_contents_compares_tokens_and_salt_up_to_the_computed_boundary() -> None:
    good = {7: BlockData("s", (1, 2)), 8: BlockData("s", (3, 99))}
    assert not props.own_contents("r", ((7, 8),), 3, (1, 2, 3, 4), "s", 2, good)
    other_salt = {**good, 7: BlockData(None, (1, 2))}
    assert names(props.own_contents("r", ((7, 8),), 3, (1, 2, 3, 4), "s", 2, other_salt)) == {
        "own-contents"
    }
    stale = {**good, 8: BlockData("s", (9,))}
    broken = props.own_contents("r", ((7, 8),), 3, (1, 2, 3, 4), "s", 2, stale)
    assert broken[0].block == 8


def test_refcounts_must_match_the_table_entries() -> None:
    assert not props.refcounts([((1, 2),), ((1, 0),)], (0, 2, 1, 0))
    broken = props.refcounts([((1, 2),)], (0, 1, 1, 1))
    assert names(broken) == {"refcounts-match-tables"} and broken[0].block == 3


def test_an_idle_pool_is_all_free_and_resets() -> None:
    assert not props.idle_pool(5, 4, True)
    assert len(props.idle_pool(5, 3, False)) == 2


def test_a_resumed_request_must_find_what_it_left() -> None:
    assert not props.resume_prefix("r", 2, 4, 9, 2)
    assert not props.resume_prefix("r", 2, 2, 4, 2)  # capped: one token is always left
    assert names(props.resume_prefix("r", 2, 2, 9, 2)) == {"resume-finds-prefix"}


def test_tail_first_means_later_entries_sit_nearer_the_front() -> None:
    assert not props.tail_first("r", ((1, 2, 3),), frozenset({1, 2, 3}), (9, 3, 2, 1))
    broken = props.tail_first("r", ((1, 2, 3),), frozenset({1, 2, 3}), (1, 2, 3))
    assert names(broken) == {"tail-first-free"}


def test_broken_names_the_request_and_the_block() -> None:
    text = str(props.Broken("write-guard", "write into block 3", "r1", 3))
    assert "write-guard" in text and "'r1'" in text and "block 3" in text
