"""Gaps are gaps, on every path a rank's history can break: first heard late, after a
restart, a new rank beside a followed one, a replay that no longer holds what was lost.
Each reports the gap, and no batch after it is judged against a consumer that lacks the
lost batches; with a snapshot that covers the gap the consumer is re-based from it and
judged again."""

from __future__ import annotations

from kvpool.conformance.tools.stream.watch import Finding, StreamWatch
from kvpool.conformance.tools.stream.wire import (
    WireBatch,
    WireMessage,
    decode_batch,
    decode_message,
)
from wire_frames import message, payload, removed, stored  # the folder is on sys.path

ONE, TWO = b"1" * 16, b"2" * 16


def watch(**kwargs: object) -> tuple[StreamWatch, list[Finding]]:
    found: list[Finding] = []
    return StreamWatch("count", found.append, **kwargs), found  # type: ignore[arg-type]


def kinds(found: list[Finding]) -> list[str]:
    return [f.kind if f.property is None else f"{f.kind} {f.property}" for f in found]


def snapshot_of(sequence: int, publisher: bytes, *events: object) -> object:
    def take(rank: int) -> tuple[int, bytes, list[WireBatch]]:
        return sequence, publisher, [decode_batch(payload(list(events)))]

    return take


def test_restart_with_a_snapshot_then_lost_batches_is_a_gap_not_a_violation() -> None:
    """Issue 27: a new publisher identity re-bootstraps from its snapshot at sequence 5;
    live batch 9 removes a hash stored in the lost batches 6-8."""
    lifetimes = [(0, ONE), (5, TWO)]  # what the snapshot endpoint answers, in turn

    def snapshot(rank: int) -> tuple[int, bytes, list[WireBatch]]:
        sequence, publisher = lifetimes.pop(0)
        return sequence, publisher, [decode_batch(payload([stored([b"a"])]))]

    w, found = watch(take_snapshot=snapshot)
    w.feed_frames(message(1, [stored([b"old"], b"a")], publisher=ONE))
    assert w.totals.snapshots == 1 and found == []  # first heard: built from its snapshot
    w.feed_frames(message(9, [removed([b"stored-in-7"])], publisher=TWO))
    assert kinds(found) == ["restart", "gap"]
    assert "3 batch(es) lost (sequence 6..8)" in found[1].message
    assert w.totals.violations == 0 and w.totals.gaps == 1
    assert w.totals.unjudged["events-removed-known"] == 1
    assert not w.ranks[0].complete


def test_first_heard_late_without_a_replay_is_a_gap() -> None:
    w, found = watch()
    w.feed_frames(message(4, [removed([b"stored-in-2"])]))
    assert kinds(found) == ["gap"] and "first heard at sequence 4" in found[0].message
    assert w.totals.violations == 0 and w.totals.missing_batches == 4


def test_first_heard_after_its_snapshot_is_a_gap_of_what_lies_between() -> None:
    w, found = watch(take_snapshot=snapshot_of(2, ONE, stored([b"a"])))
    w.feed_frames(message(6, [removed([b"stored-in-4"]), removed([b"a"])], publisher=ONE))
    assert kinds(found) == ["gap"] and "(sequence 3..5)" in found[0].message
    assert w.totals.violations == 0


def test_a_new_rank_heard_late_is_a_gap_of_its_own_and_the_followed_rank_is_judged() -> None:
    w, found = watch()
    w.feed_frames(message(0, [stored([b"a"])], rank=0))
    w.feed_frames(message(3, [removed([b"x"])], rank=1))  # rank 1: batches 0..2 unknown
    w.feed_frames(message(1, [removed([b"never"])], rank=0))
    assert kinds(found) == ["gap", "violation events-removed-known"]
    assert found[0].rank == 1 and found[1].rank == 0
    assert w.ranks[0].complete and not w.ranks[1].complete


def test_a_replay_that_no_longer_holds_the_lost_batches_leaves_a_gap() -> None:
    """The replay buffer kept 4..5 of the lost 2..5: those are applied, 2..3 stay lost."""
    history = {
        s: decode_message(message(s, [stored([bytes([s])], bytes([s - 1]) if s else None)]))
        for s in range(6)
    }
    asked: list[tuple[int, int]] = []

    def fill(rank: int, first: int, last: int) -> list[WireMessage]:
        asked.append((first, last))
        return [history[s] for s in range(max(first, 4), last + 1)]

    w, found = watch(fill_gap=fill)
    w.feed(history[0])
    w.feed(history[1])
    w.feed(decode_message(message(6, [removed([b"\x02"])])))
    assert asked == [(2, 5)]
    assert kinds(found) == ["gap"] and "2 batch(es) lost (sequence 2..3)" in found[0].message
    assert w.totals.violations == 0 and w.totals.replayed == 2
    assert w.keys_held() == 2 + 2  # what 0 and 1 stored, and the replayed 4 and 5 (unjudged)


def test_a_replay_of_an_earlier_lifetime_does_not_fill_the_gap() -> None:
    old = {s: decode_message(message(s, [stored([b"x"])], publisher=ONE)) for s in range(4)}
    w, found = watch(fill_gap=lambda rank, a, b: [old[s] for s in range(a, b + 1)])
    w.feed(decode_message(message(0, [stored([b"a"])], publisher=TWO)))
    w.feed(decode_message(message(3, [removed([b"x"])], publisher=TWO)))
    assert kinds(found) == ["gap"] and w.totals.violations == 0 and w.keys_held() == 1


def test_a_gap_a_covering_snapshot_fills_rebases_the_consumer_and_judges_again() -> None:
    taken: list[int] = []

    def snapshot(rank: int) -> tuple[int, bytes, list[WireBatch]]:
        taken.append(rank)
        return 8, ONE, [decode_batch(payload([stored([b"a"]), stored([b"b"], b"a")]))]

    w, found = watch()
    w.feed_frames(message(0, [stored([b"a"])], publisher=ONE))
    w.take_snapshot = snapshot  # (offered from now on: the rank is followed already)
    w.feed_frames(message(9, [removed([b"b"])], publisher=ONE))  # b was stored in 1..8
    assert taken == [0]
    assert kinds(found) == ["gap"] and "re-based from the publisher's snapshot at sequence 8" in (
        found[0].message
    )
    assert w.ranks[0].complete and w.totals.violations == 0
    w.feed_frames(message(10, [removed([b"never"])], publisher=ONE))  # judged again
    assert kinds(found)[-1] == "violation events-removed-known"


def test_a_snapshot_older_than_the_gap_does_not_rebase() -> None:
    w, found = watch()
    w.feed_frames(message(0, [stored([b"a"])], publisher=ONE))
    w.take_snapshot = snapshot_of(3, ONE, stored([b"a"]))  # 4..8 would still be missing
    w.feed_frames(message(9, [removed([b"b"])], publisher=ONE))
    assert kinds(found) == ["gap"] and "not judged" in found[0].message
    assert not w.ranks[0].complete and w.totals.violations == 0


def test_the_restart_gap_live_reports_a_gap_and_no_violation() -> None:
    """Issue 27 on the real wire: `kvpool monitor --snapshot`, the publisher restarts with
    a snapshot at 5 and the monitor next hears batch 9, removing a hash stored in 6-8."""
    import threading

    import zmq
    from test_stream_publish_monitor import finish, free_port, start_monitor

    live, snap = free_port(), free_port()
    context = zmq.Context()
    pub = context.socket(zmq.XPUB)
    pub.bind(f"tcp://127.0.0.1:{live}")
    server = context.socket(zmq.REP)
    server.bind(f"tcp://127.0.0.1:{snap}")
    chunk = payload([stored([b"a"])])
    replies = [
        [(0).to_bytes(8, "big", signed=True), ONE, chunk],
        [(5).to_bytes(8, "big"), TWO, chunk],
    ]

    def serve() -> None:
        for reply in replies:
            if server.poll(60_000):
                server.recv()
                server.send_multipart(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        process = start_monitor(
            "--idle", "2", "--snapshot", f"tcp://127.0.0.1:{snap}", f"tcp://127.0.0.1:{live}"
        )
        assert pub.poll(30_000), "the monitor never subscribed"
        pub.recv()
        pub.send_multipart(message(1, [stored([b"b"], b"a")], publisher=ONE))
        pub.send_multipart(message(9, [removed([b"stored-in-7"])], publisher=TWO))
        code, out = finish(process)
    finally:
        thread.join(timeout=5)
        pub.close(linger=0)
        server.close(linger=0)
        context.term()
    assert code == 0, out
    assert "GAP rank 0: 3 batch(es) lost (sequence 6..8)" in out
    assert "VIOLATION" not in out and "gaps 1 (3 batches lost), restarts 1, snapshots 2" in out
    assert "no (history unknown)" in out
