"""`kvpool monitor` over a real ZMQ socket on 127.0.0.1 never drops what it received: a
publisher that sends its last batches and closes is judged to the end, a burst is judged
or counted lost batch for batch, batches out of order are judged in sequence order and
reported as reordered, and a hostile sequence number is one malformed message."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import zmq
from kvpool.conformance.usage import EXIT_PASS
from test_stream_publish_monitor import finish, free_port, start_monitor
from wire_frames import message, removed, stored  # the folder is on sys.path


@contextmanager
def publisher() -> Iterator[tuple[zmq.Socket[bytes], str]]:
    """A bound XPUB socket on loopback (it hears the monitor subscribe), closed at the end
    after what it queued is sent."""
    context = zmq.Context()
    pub: zmq.Socket[bytes] = context.socket(zmq.XPUB)
    pub.setsockopt(zmq.SNDHWM, 0)  # the publisher itself queues everything it is given
    port = free_port()
    pub.bind(f"tcp://127.0.0.1:{port}")
    try:
        yield pub, f"tcp://127.0.0.1:{port}"
    finally:
        pub.close(linger=10_000)
        context.term()


def subscribed(pub: zmq.Socket[bytes]) -> None:
    assert pub.poll(30_000), "the monitor never subscribed"
    pub.recv()


def chain(seq: int) -> list[dict[str, object]]:
    """Batch ``seq`` of a clean stream: it stores one block after the one before it."""
    parent = None if seq == 0 else seq.to_bytes(8, "big")
    return [stored([(seq + 1).to_bytes(8, "big")], parent)]


def summary_number(out: str, label: str) -> int:
    """The number after ``label`` (a regular expression) in the monitor's summary."""
    found = re.search(rf"{label}(\d+)", out)
    assert found, (label, out)
    return int(found.group(1))


@pytest.mark.parametrize("run", range(3))
def test_thirty_batches_sent_at_once_then_the_publisher_closed_are_all_judged(run: int) -> None:
    with publisher() as (pub, endpoint):
        process = start_monitor("--idle", "2", endpoint)
        subscribed(pub)
        for seq in range(30):
            pub.send_multipart(message(seq, chain(seq)))
    code, out = finish(process)  # the publisher is closed: the connection dropped
    assert code == EXIT_PASS, out
    assert "batches judged 30," in out and "events 30," in out, out
    assert "gaps 0 (0 batches lost)" in out and "no violation" in out, out


#: The 200,050-event burst of issue 37 (20,005 batches of 10), a long run: KVPOOL_LONG=1.
LONG = pytest.mark.skipif(
    os.environ.get("KVPOOL_LONG", "") in ("", "0"), reason="a long run: set KVPOOL_LONG=1"
)


@pytest.mark.parametrize("sent", [2_000, pytest.param(20_005, marks=LONG)])
def test_a_burst_is_judged_or_counted_lost_batch_for_batch(sent: int) -> None:
    """``sent`` batches of 10 events at once: each is judged or counted in a gap (a final
    batch after a pause shows the end); every batch the socket received is judged."""
    with publisher() as (pub, endpoint):
        process = start_monitor("--idle", "3", endpoint)
        subscribed(pub)
        for seq in range(sent):
            first = 10 * seq + 1
            events = [stored([first.to_bytes(8, "big")])]
            events += [
                stored([(first + i).to_bytes(8, "big")], (first + i - 1).to_bytes(8, "big"))
                for i in range(1, 10)
            ]
            pub.send_multipart(message(seq, events))
        time.sleep(1.0)
        pub.send_multipart(message(sent, [stored([b"end"])]))
    code, out = finish(process)
    assert code == EXIT_PASS, out
    applied, lost = summary_number(out, "batches "), summary_number(out, r"gaps \d+ \(")
    received = summary_number(out, "received ")
    assert received == applied and applied + lost == sent + 1, out
    assert summary_number(out, "events ") == 10 * (applied - 1) + 1, out


def test_batches_out_of_order_are_judged_in_sequence_order_and_reported_reordered() -> None:
    with publisher() as (pub, endpoint):
        process = start_monitor("--idle", "2", endpoint)
        subscribed(pub)
        for seq in (0, 2, 3, 1, 4):
            pub.send_multipart(message(seq, chain(seq)))
    code, out = finish(process)
    assert code == EXIT_PASS, out
    assert "REORDERED rank 0: batch 1 arrived after batch(es) 2..3" in out, out
    assert "batches judged 5," in out and "reordered 1," in out, out
    assert "restarts 0" in out and "duplicates 0" in out and "gaps 0" in out, out
    assert "no violation" in out, out


def test_a_hostile_sequence_number_is_one_malformed_message_not_a_loss() -> None:
    with publisher() as (pub, endpoint):
        process = start_monitor("--idle", "2", endpoint)
        subscribed(pub)
        pub.send_multipart(message(0, [stored([b"a"])]))
        pub.send_multipart(message(2**63, [removed([b"a"])]))
        pub.send_multipart(message(1, [removed([b"a"])]))
    code, out = finish(process)
    assert code == EXIT_PASS, out
    assert out.count("MALFORMED") == 1 and "sequence 9223372036854775808" in out, out
    assert "gaps 0 (0 batches lost)" in out and "batches judged 2," in out, out


@pytest.mark.parametrize("gap_seconds", [None, "0.3"])
def test_a_gap_open_past_gap_seconds_is_reported_lost(gap_seconds: str | None) -> None:
    """Batches 0 and 2, then a pause of 1.5 s, then batch 1: with --gap-seconds 0.3 the gap
    is reported during the pause and batch 1 is late; without, batch 1 is judged in
    sequence order (reordered) and nothing is lost."""
    timeout = ["--gap-seconds", gap_seconds] if gap_seconds else []
    with publisher() as (pub, endpoint):
        process = start_monitor("--idle", "2.5", "--reorder-window", "8", *timeout, endpoint)
        subscribed(pub)
        for seq in (0, 2):
            pub.send_multipart(message(seq, chain(seq)))
        time.sleep(1.5)
        pub.send_multipart(message(1, chain(1)))
        code, out = finish(process)
    if gap_seconds:
        assert (
            "gaps 1 (1 batches lost)" in out
            and summary_number(out, r"late \(after their gap\) ") == 1
        ), out
        assert summary_number(out, "reordered ") == 0, out
    else:
        assert code == EXIT_PASS, out
        assert "gaps 0 (0 batches lost)" in out and summary_number(out, "reordered ") == 1, out
