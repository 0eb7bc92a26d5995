"""Hostile input to `kvpool monitor`, live and recorded: each crash issue 27 lists is now
one counted, reported malformed message (live) or one named bad line (a file), never a
traceback or the status that means "violations"; and a stream naming many ranks or
restarting often costs one replay wait per endpoint, not one per rank."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import zmq
from click.testing import CliRunner
from kvpool.conformance.bounds import MAX_FRAME_BYTES
from kvpool.conformance.cli import main
from kvpool.conformance.tools.stream.subscriber import Subscriber
from kvpool.conformance.tools.stream.watch import Finding, StreamWatch
from kvpool.conformance.usage import EXIT_PASS, EXIT_USAGE
from test_stream_publish_monitor import TIMEOUT, finish, free_port, start_monitor
from wire_frames import message, payload, removed, stored  # the folder is on sys.path

#: The payload of issue 27: 200 000 nested one-item arrays.
DEEP = b"\x91" * 200_000 + b"\x00"
HEADER = {"format": "kvpool-kv-events", "version": 1, "sources": ["tcp://127.0.0.1:1"]}


def line(frames: list[bytes], via: str = "live") -> str:
    return json.dumps(
        {"t": 0.0, "via": via, "frames": [base64.b64encode(f).decode() for f in frames]}
    )


def recording(tmp_path: Path, *lines: str | bytes) -> Path:
    path = tmp_path / "stream.jsonl"
    body = [json.dumps({**HEADER, "started": 0.0}).encode()]
    body += [t if isinstance(t, bytes) else t.encode() for t in lines]
    path.write_bytes(b"\n".join(body) + b"\n")
    return path


def monitor(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["monitor", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def test_a_recorded_deeply_nested_payload_is_one_malformed_message(tmp_path: Path) -> None:
    path = recording(
        tmp_path,
        line(message(0, [stored([b"a"])])),
        line([b"", (1).to_bytes(8, "big"), DEEP]),
        line(message(1, [removed([b"a"])])),
    )
    code, out = monitor(str(path))
    assert code == EXIT_PASS, out
    assert out.count("MALFORMED") == 1 and "nests deeper than 16 levels" in out
    assert "malformed 1" in out and "no violation" in out


def test_an_oversized_recorded_payload_is_one_malformed_message(tmp_path: Path) -> None:
    big = payload([stored([b"a"])]) + b"\x00" * MAX_FRAME_BYTES
    path = recording(tmp_path, line([b"", (0).to_bytes(8, "big"), big]))
    code, out = monitor(str(path))
    assert code == EXIT_PASS and f"(at most {MAX_FRAME_BYTES})" in out, out


def test_a_line_of_open_brackets_names_the_line(tmp_path: Path) -> None:
    path = recording(tmp_path, line(message(0, [])), "[" * 100_000)
    code, out = monitor(str(path))
    assert code == EXIT_USAGE, out
    assert "line 3" in out and ("nests deeper" in out or "not JSON" in out), out
    assert "Traceback" not in out


def test_a_line_with_a_byte_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = recording(tmp_path, line(message(0, [])), b'{"t": 0, "via": "\xff"}')
    code, out = monitor(str(path))
    assert code == EXIT_USAGE and "line 3 is not UTF-8" in out, out


def test_a_header_that_is_not_utf8_names_line_one(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\xff\xfe{}\n")
    code, out = monitor(str(path))
    assert code == EXIT_USAGE and "line 1 is not UTF-8" in out, out


def test_a_saved_snapshot_entry_of_the_wrong_widths_is_malformed(tmp_path: Path) -> None:
    path = recording(
        tmp_path,
        line([b"\x00" * 3, b"I" * 16, payload([])], via="snapshot"),
        line([(-7).to_bytes(8, "big", signed=True), b"I" * 16], via="snapshot"),
    )
    code, out = monitor(str(path))
    assert code == EXIT_PASS and out.count("MALFORMED") == 2, out
    assert "expected sequence, publisher identity" in out and "snapshot sequence -7" in out


def test_ranks_beyond_the_bound_are_refused_and_counted() -> None:
    found: list[Finding] = []
    watch = StreamWatch("count", found.append, max_ranks=3)
    for rank in range(5):
        watch.feed_frames(message(0, [stored([b"a"])], rank=rank))
    assert sorted(watch.ranks) == [0, 1, 2]
    assert [f.kind for f in found] == ["malformed", "malformed"]
    assert "rank 3 refused: this monitor follows at most 3 ranks" in found[0].message
    watch.feed_frames(message(1, [removed([b"a"])], rank=2))  # a followed rank goes on
    assert watch.totals.violations == 0 and watch.totals.events == 4


def test_the_deep_payload_live_is_one_malformed_message() -> None:
    port = free_port()
    context = zmq.Context()
    pub = context.socket(zmq.XPUB)
    pub.bind(f"tcp://127.0.0.1:{port}")
    try:
        process = start_monitor("--idle", "2", f"tcp://127.0.0.1:{port}")
        assert pub.poll(30_000), "the monitor never subscribed"
        pub.recv()
        pub.send_multipart(message(0, [stored([b"a"])]))
        pub.send_multipart([b"", (1).to_bytes(8, "big"), DEEP])
        pub.send_multipart(message(1, [removed([b"a"])]))
        code, out = finish(process)
    finally:
        pub.close(linger=0)
        context.term()
    assert code == EXIT_PASS, out
    assert "Traceback" not in out and out.count("MALFORMED") == 1
    assert "malformed 1" in out and "no violation" in out


def test_a_frame_above_the_bound_resets_the_connection_and_monitoring_goes_on() -> None:
    """ZMQ drops a connection that sends a frame above the socket's limit and does not
    connect again by itself: the monitor does, says so, and hears what follows."""
    port = free_port()
    context = zmq.Context()
    pub = context.socket(zmq.XPUB)
    pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, also a repeated one
    pub.bind(f"tcp://127.0.0.1:{port}")
    try:
        process = start_monitor("--idle", "3", f"tcp://127.0.0.1:{port}")
        assert pub.poll(30_000), "the monitor never subscribed"
        pub.recv()
        pub.send_multipart(message(0, [stored([b"a"])]))
        time.sleep(0.5)  # (read before the reset, or lost with the old socket: a gap)
        pub.send_multipart([b"", (1).to_bytes(8, "big"), b"\x00" * (MAX_FRAME_BYTES + 1)])
        while True:  # the old connection's unsubscription may come first
            assert pub.poll(30_000), "the monitor never subscribed again"
            if pub.recv().startswith(b"\x01"):
                break
        pub.send_multipart(message(2, [removed([b"a"])]))
        code, out = finish(process)
    finally:
        pub.close(linger=0)
        context.term()
    assert code == EXIT_PASS, out
    assert "RESET tcp://127.0.0.1:" in out and "connected again" in out
    assert "connection resets 1" in out and "VIOLATION" not in out, out
    assert re.search(r"│\s+0 │\s+3 │", out), "batch 2, sent after the reset, was heard"


def test_many_ranks_and_restarts_cost_one_replay_wait_per_endpoint() -> None:
    """40 ranks heard late and 10 restarts of rank 0, behind silent replay servers on the
    ports of ranks 0..39: only rank 0's endpoint (the one --dp-ranks 1 names) is asked,
    once; the others are reported as gaps without a wait."""
    ranks = 40
    port, replay = free_port(), _free_run(ranks)
    context = zmq.Context()
    pub = context.socket(zmq.XPUB)
    pub.bind(f"tcp://127.0.0.1:{port}")
    servers = []
    for r in range(ranks):
        server = context.socket(zmq.ROUTER)
        server.bind(f"tcp://127.0.0.1:{replay + r}")
        servers.append(server)
    asked = [0] * ranks
    stop = threading.Event()

    def count() -> None:
        poller = zmq.Poller()
        for s in servers:
            poller.register(s, zmq.POLLIN)
        while not stop.is_set():
            for s, _ in poller.poll(100):
                s.recv_multipart()
                asked[servers.index(s)] += 1  # and never answered

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    try:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "kvpool"),
                "monitor",
                "--idle",
                "3",
                "--seconds",
                "200",
                "--replay",
                f"tcp://127.0.0.1:{replay}",
                f"tcp://127.0.0.1:{port}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert pub.poll(30_000), "the monitor never subscribed"
        pub.recv()
        for r in range(1, ranks):
            pub.send_multipart(message(3, [], rank=r))
        for n in range(10):
            pub.send_multipart(message(3, [], rank=0, publisher=bytes([n]) * 16))
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        stop.set()
        counter.join()
        for s in [pub, *servers]:
            s.close(linger=0)
        context.term()
    assert process.returncode == EXIT_PASS, out + err
    # the start-up replay of rank 0 is the one wait; rank 0's restarts find it silent
    assert asked == [1] + [0] * (ranks - 1), asked
    # a gap for each rank heard late, and for each of rank 0's ten lifetimes
    assert "restarts 9" in out and f"gaps {ranks - 1 + 10} " in out, out


def test_a_silent_replay_endpoint_is_not_asked_again() -> None:
    port = free_port()
    context = zmq.Context()
    server = context.socket(zmq.ROUTER)
    server.bind(f"tcp://127.0.0.1:{port}")
    subscriber = Subscriber([], "", replay=f"tcp://127.0.0.1:{port}")
    try:
        assert subscriber.replay(0, 0) == []  # the one wait
        assert server.poll(5_000) and server.recv_multipart()
        assert f"tcp://127.0.0.1:{port}" in subscriber.silent
        assert subscriber.replay(0, 5) == []
        assert not server.poll(500), "a silent endpoint was asked again"
    finally:
        subscriber.close()
        server.close(linger=0)
        context.term()


def _free_run(n: int) -> int:
    """A port p with p .. p + n - 1 all free."""
    import socket

    for _ in range(100):
        base = free_port()
        held = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
        return base
    raise RuntimeError(f"no {n} adjacent free ports")


def test_a_rank_holding_more_keys_than_the_bound_starts_over_unjudged() -> None:
    found: list[Finding] = []
    watch = StreamWatch("set", found.append, max_keys=3)
    watch.feed_frames(message(0, [stored([b"a"]), stored([b"b"], b"a"), stored([b"c"], b"b")]))
    assert found == [] and watch.keys_held() == 3
    watch.feed_frames(message(1, [stored([b"d"], b"c")]))
    assert [f.kind for f in found] == ["gap"] and "holds more than 3 keys" in found[0].message
    assert watch.keys_held() == 0 and watch.totals.overflows == 1
    watch.feed_frames(message(2, [removed([b"a"])]))  # stored before: not judged
    assert watch.totals.violations == 0 and watch.totals.unjudged["events-removed-known"] == 1
