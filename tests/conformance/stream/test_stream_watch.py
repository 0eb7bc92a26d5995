"""The monitor's core: each stream property caught on a planted fault, and gaps, restarts,
ranks, duplicates, snapshots and malformed frames handled as what they are."""

from __future__ import annotations

import pytest
from kvpool.conformance.tools.stream.watch import Finding, StreamWatch
from kvpool.conformance.tools.stream.wire import WireMessage, decode_batch, decode_message
from wire_frames import CLEARED, message, payload, removed, stored  # the folder is on sys.path


def watch(model: str, **kwargs: object) -> tuple[StreamWatch, list[Finding]]:
    found: list[Finding] = []
    return StreamWatch(model, found.append, **kwargs), found  # type: ignore[arg-type]


def kinds(found: list[Finding]) -> list[tuple[str, str | None]]:
    return [(f.kind, f.property) for f in found]


#: One prefix cached in two blocks, then one copy evicted: right for a counting consumer.
DUPLICATE_COPY = [
    [stored([b"a"]), stored([b"b"], b"a")],
    [stored([b"b"], b"a")],
    [removed([b"b"])],
    [stored([b"c"], b"b")],
    [removed([b"b"]), removed([b"c"])],
]


@pytest.mark.parametrize("model", ["count", "set"])
def test_a_clean_stream_shows_nothing(model: str) -> None:
    w, found = watch(model)
    for seq, events in enumerate([[stored([b"a"]), stored([b"b"], b"a")], [removed([b"b"])]]):
        w.feed_frames(message(seq, events))
    assert found == [] and w.totals.events == 3 and w.keys_held() == 1


def test_count_consumer_follows_each_copy_of_a_duplicate() -> None:
    w, found = watch("count")
    for seq, events in enumerate(DUPLICATE_COPY):
        w.feed_frames(message(seq, events))
    assert found == []
    assert w.keys_held() == 1  # only "a" is left


def test_set_consumer_loses_the_hash_at_the_first_removal_of_two_copies() -> None:
    w, found = watch("set")
    for seq, events in enumerate(DUPLICATE_COPY):
        w.feed_frames(message(seq, events))
    assert kinds(found) == [
        ("violation", "events-replay-index"),  # seq 2: lost b while one copy remains
        ("violation", "events-parent-known"),  # seq 3: c's parent b is gone
        ("violation", "events-removed-known"),  # seq 4: the second copy's removal
    ]
    first = found[0]
    assert first.sequence == 2 and first.at is not None and first.at.sequence == 2
    # the window names both stores of b and the removal
    lines = [s.line() for s in first.window]
    assert sum("BlockStored [62]" in line for line in lines) == 2
    assert any("BlockRemoved [62]" in line for line in lines)


@pytest.mark.parametrize("model", ["count", "set"])
def test_planted_unknown_parent_is_caught(model: str) -> None:
    w, found = watch(model)
    w.feed_frames(message(0, [stored([b"a"]), stored([b"x"], b"never-stored")]))
    assert kinds(found) == [("violation", "events-parent-known")]
    assert "6e657665" in found[0].message  # the parent's hash, in hex


@pytest.mark.parametrize("model", ["count", "set"])
def test_planted_unknown_removal_is_caught(model: str) -> None:
    w, found = watch(model)
    w.feed_frames(message(0, [stored([b"a"])]))
    w.feed_frames(message(1, [removed([b"a"]), removed([b"a"])]))
    assert kinds(found) == [("violation", "events-removed-known")]
    assert found[0].sequence == 1


def test_removal_in_another_group_is_not_the_stored_hash() -> None:
    w, found = watch("count")
    w.feed_frames(message(0, [stored([b"a"], group=0), removed([b"a"], group=1)]))
    assert kinds(found) == [("violation", "events-removed-known")]


def test_a_lost_batch_is_a_gap_not_a_violation() -> None:
    w, found = watch("count")
    w.feed_frames(message(0, [stored([b"a"])]))
    # batch 1 (storing b) is lost
    w.feed_frames(message(2, [removed([b"b"]), stored([b"c"], b"b")]))
    assert kinds(found) == [("gap", None)]
    assert w.totals.gaps == 1 and w.totals.missing_batches == 1
    assert w.totals.violations == 0 and sum(w.totals.unjudged.values()) == 2
    # after AllBlocksCleared the history is known again: violations count again
    w.feed_frames(message(3, [CLEARED, removed([b"z"])]))
    assert kinds(found)[-1] == ("violation", "events-removed-known")


def test_a_gap_the_replay_fills_is_no_gap() -> None:
    sent = {
        seq: decode_message(message(seq, events))
        for seq, events in enumerate([[stored([b"a"])], [stored([b"b"], b"a")], [removed([b"b"])]])
    }
    asked: list[tuple[int, int, int]] = []

    def fill(rank: int, first: int, last: int) -> list[WireMessage]:
        asked.append((rank, first, last))
        return [sent[s] for s in range(first, last + 1)]

    w, found = watch("count", fill_gap=fill)
    w.feed(sent[0])
    w.feed(sent[2])
    assert asked == [(0, 1, 1)] and found == [] and w.totals.replayed == 1


def test_a_late_monitor_replays_from_zero_or_reports_the_history_unknown() -> None:
    history = [decode_message(message(s, [stored([bytes([s])])])) for s in range(3)]
    w, found = watch("count", fill_gap=lambda rank, a, b: history[a : b + 1])
    w.feed(decode_message(message(3, [removed([b"\x01"])])))
    assert found == [] and w.ranks[0].complete
    w2, found2 = watch("count")  # no replay socket
    w2.feed(decode_message(message(3, [removed([b"\x01"])])))
    assert kinds(found2) == [("gap", None)] and not w2.ranks[0].complete
    assert w2.totals.violations == 0


def test_a_sequence_reset_is_a_restart_with_an_empty_consumer() -> None:
    w, found = watch("count")
    w.feed_frames(message(0, [stored([b"a"])]))
    w.feed_frames(message(1, [stored([b"b"], b"a")]))
    w.feed_frames(message(1, [stored([b"b"], b"a")]))  # a duplicate: the same batch again
    assert found == [] and w.totals.duplicates == 1
    w.feed_frames(message(0, [stored([b"a"])], ts=9.0))  # the engine came back
    w.feed_frames(message(1, [removed([b"b"])], ts=9.5))  # b is not stored in this lifetime
    assert kinds(found) == [("restart", None), ("violation", "events-removed-known")]
    assert w.totals.restarts == 1


def test_a_new_publisher_identity_is_a_restart_and_an_old_sequence_a_duplicate() -> None:
    w, found = watch("count")
    one, two = b"1" * 16, b"2" * 16
    w.feed_frames(message(0, [stored([b"a"])], publisher=one))
    w.feed_frames(message(1, [stored([b"b"], b"a")], publisher=one))
    w.feed_frames(message(1, [stored([b"b"], b"a")], publisher=one))  # seen already
    assert w.totals.duplicates == 1 and found == []
    w.feed_frames(message(0, [], publisher=two))  # a heartbeat of the new lifetime
    assert kinds(found) == [("restart", None)] and w.keys_held() == 0
    assert w.totals.heartbeats == 1


def test_each_rank_has_its_own_consumer_and_sequence() -> None:
    w, found = watch("count")
    w.feed_frames(message(0, [stored([b"a"])], rank=0))
    w.feed_frames(message(0, [stored([b"x"])], rank=1))
    w.feed_frames(message(1, [removed([b"a"])], rank=0))
    w.feed_frames(message(1, [removed([b"a"])], rank=1))  # rank 1 never stored a
    assert kinds(found) == [("violation", "events-removed-known")]
    assert found[0].rank == 1 and set(w.ranks) == {0, 1}


def test_malformed_and_truncated_frames_are_counted_and_the_stream_goes_on() -> None:
    w, found = watch("count")
    w.feed_frames(message(0, [stored([b"a"])]))
    w.feed_frames([b"", (1).to_bytes(8, "big"), payload([removed([b"a"])])[:-3]])
    w.feed_frames([b"only one frame"])
    w.feed_frames(message(1, [removed([b"a"])]))
    assert kinds(found) == [("malformed", None), ("malformed", None)]
    assert w.totals.malformed == 2 and w.totals.violations == 0 and w.keys_held() == 0


def test_a_snapshot_rebuilds_the_cache_and_the_live_stream_follows_it() -> None:
    w, found = watch("set")
    pid = b"P" * 16
    chunk = decode_batch(payload([stored([b"a"]), stored([b"b"], b"a"), stored([b"b"], b"a")]))
    w.install_snapshot(0, 4, pid, [chunk])
    w.feed_frames(message(3, [stored([b"old"])], publisher=pid))  # before the snapshot
    w.feed_frames(message(5, [removed([b"b"])], publisher=pid))
    assert w.totals.duplicates == 1
    assert kinds(found) == [("violation", "events-replay-index")]


def test_unknown_consumer_model_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown consumer 'bag': built in are count, set"):
        StreamWatch("bag", lambda f: None)
