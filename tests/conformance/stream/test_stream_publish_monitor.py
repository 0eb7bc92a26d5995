"""`kvpool publish` and `kvpool monitor` as processes, over real TCP ZMQ sockets on
127.0.0.1, with vLLM 0.33.0's own publisher from its wheel; planted faults, malformed and
truncated frames, a lost batch and a restart on the real wire."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import zmq
from kvpool.conformance.tools.stream.publisher import load_publisher, start_publisher
from wire_frames import message, payload, removed, stored  # the folder is on sys.path

KVPOOL = str(Path(sys.executable).parent / "kvpool")
#: Generous: the machine may be busy; the commands themselves take a second or two.
TIMEOUT = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_monitor(*args: str) -> subprocess.Popen[str]:
    """A ``kvpool monitor`` process, returned once its sockets are connected."""
    process = subprocess.Popen(
        [KVPOOL, "monitor", "--seconds", "200", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    assert line.startswith("monitoring "), line
    time.sleep(0.3)  # the TCP connection to a bound publisher
    return process


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = process.communicate(timeout=TIMEOUT)
    return process.returncode, out + err


def publish(port: int, replay: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            KVPOOL,
            "publish",
            "--endpoint",
            f"tcp://*:{port}",
            "--replay-endpoint",
            f"tcp://*:{replay}",
            "--requests",
            "24",
            "--rate",
            "0",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def batches_published(output: str) -> int:
    row = re.search(r"│\s+(\d+)\s+│\s+\d+\s+│\s+\d+\s+│", output)
    assert row, output
    return int(row.group(1))


def test_vllm_0_33_stream_live_set_finds_the_duplicate_copy_count_finds_nothing() -> None:
    port, replay = free_port(), free_port()
    live = ["--replay", f"tcp://127.0.0.1:{replay}", "--idle", "3", f"tcp://127.0.0.1:{port}"]
    early_set = start_monitor("--consumer", "set", *live)
    early_count = start_monitor("--consumer", "count", *live)
    publisher = publish(port, replay, "--target", "vllm==0.33.0", "--twins", "1", "--hold", "60")
    assert publisher.stderr is not None
    published = ""
    while "kvpool publish" not in published:  # the summary: every batch is out
        line = publisher.stderr.readline()
        assert line, f"the publisher stopped: {published}"
        published += line
    while "replay socket up" not in published:
        published += publisher.stderr.readline()
    # started after the publisher's last batch: everything comes from the replay socket
    late_count = start_monitor("--consumer", "count", *live[:2], "--idle", "1", live[-1])
    results = {
        name: finish(p)
        for name, p in [("set", early_set), ("count", early_count), ("late", late_count)]
    }
    publisher.terminate()
    publisher.communicate(timeout=TIMEOUT)
    total = batches_published(published)

    code, out = results["set"]
    assert code == 1, out
    assert "VIOLATION rank 0" in out and "events-replay-index: the set consumer lost hash" in out
    assert "while the count consumer still holds 1 copy" in out
    for name in ("set", "count", "late"):
        assert f"batches {total} " in results[name][1], (name, total, results[name][1])
        assert "gaps 0 " in results[name][1]
    for name in ("count", "late"):
        code, out = results[name]
        assert code == 0 and "no violation of the count consumer" in out, out
    assert f"replayed {total}," in results["late"][1]  # all of it from the replay socket


def test_impl_stream_live_count_finds_nothing() -> None:
    port, replay = free_port(), free_port()
    monitor = start_monitor(
        "--consumer",
        "count",
        "--replay",
        f"tcp://127.0.0.1:{replay}",
        "--idle",
        "3",
        f"tcp://127.0.0.1:{port}",
    )
    publisher = publish(port, replay, "--target", "impl", "--twins", "1", "--hold", "1")
    code, out = finish(monitor)
    publisher.communicate(timeout=TIMEOUT)
    assert publisher.returncode == 0
    assert code == 0 and "no violation of the count consumer" in out, out


@pytest.fixture(scope="module")
def vllm_events() -> Any:
    return load_publisher("0.33.0", int_hashes=True)


def test_planted_faults_through_vllm_publisher_are_each_caught(vllm_events: Any) -> None:
    """Batches of vLLM 0.33.0's own classes, each planting one fault, published by its
    ZmqEventPublisher: the count monitor catches the unknown parent and the unknown
    removal, the set monitor also the removal of one of two copies."""
    port, replay = free_port(), free_port()
    live = ["--replay", f"tcp://127.0.0.1:{replay}", "--idle", "2", f"tcp://127.0.0.1:{port}"]
    count = start_monitor("--consumer", "count", *live)
    as_set = start_monitor("--consumer", "set", *live)
    pub = start_publisher(vllm_events, f"tcp://*:{port}", f"tcp://*:{replay}", "")
    m = vllm_events.kv_events

    def store(h: int, parent: int | None) -> Any:
        return m.BlockStored(
            block_hashes=[h],
            parent_block_hash=parent,
            token_ids=[1, 2],
            block_size=2,
            lora_id=None,
            medium="GPU",
            lora_name=None,
            group_idx=0,
        )

    def remove(h: int) -> Any:
        return m.BlockRemoved(block_hashes=[h], medium="GPU", group_idx=0)

    plan = [
        [store(1, None), store(2, 1)],
        [store(2, 1)],  # a second copy of 2
        [remove(2)],  # set: loses 2 while a copy remains (events-replay-index)
        [store(3, 77)],  # parent 77 never stored (events-parent-known)
        [remove(99)],  # 99 never stored (events-removed-known)
    ]
    try:
        time.sleep(0.5)
        for events in plan:
            pub.publish(m.KVEventBatch(ts=time.time(), events=events))
        results = {"count": finish(count), "set": finish(as_set)}
    finally:
        pub.shutdown()
    code, out = results["count"]
    assert code == 1, out
    assert "1 violation(s) of events-parent-known" in out
    assert "1 violation(s) of events-removed-known" in out
    assert "events-replay-index" not in out
    code, out = results["set"]
    assert code == 1, out
    assert "events-replay-index: the set consumer lost hash 0000000000000002" in out


def test_malformed_truncated_lost_and_restarted_on_the_wire() -> None:
    """Raw frames on a real socket: two malformed messages, a lost batch and a restart
    are reported as such, none as a violation, and the monitor runs to its end."""
    port = free_port()
    context = zmq.Context()
    pub = context.socket(zmq.XPUB)  # XPUB: sees the monitor's subscription arrive
    pub.bind(f"tcp://127.0.0.1:{port}")
    try:
        monitor = start_monitor("--consumer", "count", "--idle", "2", f"tcp://127.0.0.1:{port}")
        assert pub.poll(30_000), "the monitor never subscribed"
        pub.recv()
        frames = [
            message(0, [stored([b"a"])]),
            [b"", (1).to_bytes(8, "big"), payload([removed([b"a"])])[:-4]],  # truncated
            [b"", b"\x00\x01", payload([])],  # a 2-byte sequence frame
            message(1, [stored([b"b"], b"a")]),
            # batch 2 (storing c) lost
            message(3, [removed([b"c"])]),  # not judged: the history has a hole
            message(0, [stored([b"x"])], ts=5.0),  # the engine restarted
            message(1, [removed([b"x"])], ts=5.5),
        ]
        for f in frames:
            pub.send_multipart(f)
        code, out = finish(monitor)
    finally:
        pub.close(linger=0)
        context.term()
    assert code == 0, out
    assert out.count("MALFORMED") == 2
    assert "truncated" in out or "not msgpack" in out
    assert "sequence frame of 2 bytes" in out
    assert "GAP rank 0: 1 batch(es) lost (sequence 2..2)" in out
    assert "RESTART rank 0: publisher restarted (sequence back to 0)" in out
    assert "VIOLATION" not in out and "not judged (history unknown after a gap)" in out


def free_pair() -> int:
    """A port p with p + 1 free too (rank 1's port)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two adjacent free ports")


def test_newer_wire_snapshots_heartbeats_and_two_ranks() -> None:
    """The newer wire format (24-byte sequence with a publisher identity, empty heartbeat
    batches, a snapshot endpoint) on two data-parallel ranks: rank 0 is bootstrapped from
    its snapshot, rank 1's snapshot is unavailable (-2) and it is followed from batch 0;
    each rank is judged on its own."""
    live, snap = free_pair(), free_pair()
    context = zmq.Context()
    pubs = [context.socket(zmq.XPUB) for _ in range(2)]
    servers = [context.socket(zmq.REP) for _ in range(2)]
    for rank in range(2):
        pubs[rank].bind(f"tcp://127.0.0.1:{live + rank}")
        servers[rank].bind(f"tcp://127.0.0.1:{snap + rank}")
    a, b = b"A" * 16, b"B" * 16
    snapshot_chunk = payload([stored([b"a"]), stored([b"b"], b"a"), stored([b"b"], b"a")])
    replies = [
        [(4).to_bytes(8, "big", signed=True), a, snapshot_chunk],
        [(-2).to_bytes(8, "big", signed=True), b],
    ]

    def serve(rank: int) -> None:
        if servers[rank].poll(60_000):
            assert servers[rank].recv() == b"snapshot"
            servers[rank].send_multipart(replies[rank])

    import threading

    threads = [threading.Thread(target=serve, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    try:
        monitor = start_monitor(
            "--consumer",
            "set",
            "--dp-ranks",
            "2",
            "--idle",
            "2",
            "--snapshot",
            f"tcp://127.0.0.1:{snap}",
            f"tcp://127.0.0.1:{live}",
        )
        for pub in pubs:
            assert pub.poll(30_000), "the monitor never subscribed"
            pub.recv()
        pubs[0].send_multipart(message(4, [stored([b"old"])], publisher=a))  # in the snapshot
        pubs[0].send_multipart(message(5, [], publisher=a))  # a heartbeat
        pubs[0].send_multipart(message(6, [removed([b"b"])], publisher=a))
        pubs[1].send_multipart(message(0, [stored([b"x"])], rank=1, publisher=b))
        pubs[1].send_multipart(message(1, [removed([b"y"])], rank=1, publisher=b))
        code, out = finish(monitor)
    finally:
        for s in [*pubs, *servers]:
            s.close(linger=0)
        context.term()
    assert code == 1, out
    assert "VIOLATION rank 0 seq 6: events-replay-index: the set consumer lost hash 62" in out
    assert "VIOLATION rank 1 seq 1: events-removed-known" in out
    summary = next(line for line in out.splitlines() if line.startswith("events "))
    assert "snapshots 1," in summary, summary
    assert "heartbeats 1," in summary and "duplicates 1)" in summary, summary
    assert out.count("VIOLATION") == 2
