"""The reorder window: batches out of order are judged in sequence order and reported as
reordered (not as restarts or duplicates), a missing batch that never comes is a gap once
the window is full or the stream ends, a batch after its reported gap is late; and a
sequence number no publisher reaches is a malformed message, not a loss."""

from __future__ import annotations

from kvpool.conformance.tools.stream.watch import Finding, StreamWatch
from wire_frames import message, removed, stored  # the folder is on sys.path


def watch(window: int = 4) -> tuple[StreamWatch, list[Finding]]:
    found: list[Finding] = []
    return StreamWatch("set", found.append, reorder_window=window), found


def chain(seq: int) -> list[dict[str, object]]:
    """Batch ``seq``: a block stored after the one batch ``seq - 1`` stored."""
    return [stored([bytes([seq + 1])], None if seq == 0 else bytes([seq]))]


def test_a_batch_overtaken_by_two_is_judged_in_order_and_reported_reordered() -> None:
    w, found = watch()
    for seq in (0, 2, 3, 1, 4):
        w.feed_frames(message(seq, chain(seq)))
    w.finish()
    assert [f.kind for f in found] == ["reordered"]
    assert "batch 1 arrived after batch(es) 2..3" in found[0].message
    t = w.totals
    assert (t.judged, t.reordered, t.restarts, t.duplicates, t.gaps) == (5, 1, 0, 0, 0)
    assert t.violations == 0  # each parent was applied before its child


def test_without_a_window_the_same_stream_is_a_gap_and_a_late_batch() -> None:
    w, found = watch(window=0)
    for seq in (0, 2, 3, 1, 4):
        w.feed_frames(message(seq, chain(seq)))
    assert [f.kind for f in found] == ["gap", "reordered"]
    assert "arrived after its gap was reported" in found[1].message
    assert (w.totals.late, w.totals.restarts, w.totals.gaps) == (1, 0, 1)


def test_a_batch_that_never_comes_is_a_gap_once_the_window_is_full() -> None:
    w, found = watch(window=2)
    for seq in (0, 2, 3):
        w.feed_frames(message(seq, chain(seq)))
    assert found == [] and w.totals.held_back == 2
    w.feed_frames(message(4, chain(4)))  # a third waits: the oldest waits no longer
    assert [f.kind for f in found] == ["gap"] and "sequence 1..1" in found[0].message
    assert w.totals.held_back == 0 and w.totals.batches == 4 and w.totals.judged == 1


def test_batches_still_waiting_when_the_stream_ends_are_judged_after_a_gap() -> None:
    w, found = watch()
    for seq in (0, 2):
        w.feed_frames(message(seq, chain(seq)))
    assert found == []
    w.finish()
    assert [f.kind for f in found] == ["gap"] and w.totals.batches == 2
    assert w.totals.received == w.totals.batches and w.totals.missing_batches == 1


def test_a_restart_while_batches_wait_judges_them_first() -> None:
    w, found = watch()
    for seq in (0, 1, 3):
        w.feed_frames(message(seq, chain(seq)))
    w.feed_frames(message(0, [stored([b"new"])], ts=2.0))  # back to 0: a restart
    assert [f.kind for f in found] == ["gap", "restart"]
    assert w.totals.batches == 4 and w.totals.restarts == 1


def test_a_sequence_far_past_any_gap_is_malformed_and_changes_nothing() -> None:
    w, found = watch()
    w.feed_frames(message(0, [stored([b"a"])]))
    w.feed_frames(message(2**63, [removed([b"a"])]))
    w.feed_frames(message(1, [removed([b"a"])]))
    assert [f.kind for f in found] == ["malformed"]
    assert "9223372036854775807 batches past the next expected (1)" in found[0].message
    assert (w.totals.gaps, w.totals.missing_batches, w.totals.judged) == (0, 0, 2)


def test_a_rank_first_heard_at_an_implausible_sequence_is_malformed() -> None:
    w, found = watch()
    w.feed_frames(message(2**40, [stored([b"a"])]))
    assert [f.kind for f in found] == ["malformed"] and w.ranks == {}
    w.feed_frames(message(0, [stored([b"a"])]))
    assert w.totals.judged == 1 and w.totals.missing_batches == 0


def test_a_restart_after_a_late_start_is_a_restart_not_a_late_batch() -> None:
    w, found = watch()
    w.feed_frames(message(5, chain(5)))  # first heard at 5: 0..4 unknown
    w.feed_frames(message(0, [stored([b"new"])], ts=2.0))  # back to 0: the next lifetime
    assert [f.kind for f in found] == ["gap", "restart"] and w.totals.late == 0
