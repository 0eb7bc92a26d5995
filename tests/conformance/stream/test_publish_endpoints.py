"""`kvpool publish --endpoint` connects or binds exactly as its help says: a wildcard binds
on loopback unless --bind names another interface; tcp://HOST:PORT connects, so nothing
listens; any address off loopback is bound only when --bind names it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq
from kvpool.conformance.tools.stream.publish_command import endpoints
from kvpool.conformance.tools.stream.publisher import PublisherError

KVPOOL = str(Path(sys.executable).parent / "kvpool")


def test_a_wildcard_binds_on_loopback_by_default() -> None:
    assert endpoints("tcp://*:5557", "127.0.0.1", "tcp://*:5558") == (
        "tcp://*:5557",
        "tcp://*:5558",
        "127.0.0.1",
    )


def test_an_address_connects_and_its_replay_socket_stays_on_loopback() -> None:
    assert endpoints("tcp://0.0.0.0:5557", "127.0.0.1", "tcp://*:5558") == (
        "tcp://0.0.0.0:5557",
        "tcp://127.0.0.1:5558",
        None,
    )


@pytest.mark.parametrize(
    ("endpoint", "bind", "replay", "message"),
    [
        ("tcp://*:5557", "127.0.0.1", "tcp://0.0.0.0:5558", "--replay-endpoint"),
        ("tcp://*:5557", "127.0.0.1", "tcp://10.1.2.3:5558", "off loopback"),
        ("tcp://[::]:5557", "127.0.0.1", None, "would bind it"),
    ],
)
def test_binding_off_loopback_needs_bind_to_name_it(
    endpoint: str, bind: str, replay: str | None, message: str
) -> None:
    with pytest.raises(PublisherError, match=message):
        endpoints(endpoint, bind, replay)


def test_bind_naming_the_interface_or_every_one_allows_it() -> None:
    assert endpoints("tcp://*:5557", "*", "tcp://0.0.0.0:5558")[1] == "tcp://0.0.0.0:5558"
    assert endpoints("tcp://*:5557", "tcp://10.1.2.3:5557", "tcp://10.1.2.3:5558")[0] == (
        "tcp://10.1.2.3:5557"
    )


def test_publish_to_an_address_connects_to_a_subscriber_that_binds() -> None:
    """The issue's case: --endpoint tcp://127.0.0.1:P listened; now it connects to P."""
    context = zmq.Context.instance()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    command = [KVPOOL, "publish", "--endpoint", f"tcp://127.0.0.1:{port}"]
    command += ["--replay-endpoint", "none", "--requests", "8", "--rate", "0", "--wait", "1"]
    publisher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poller = zmq.Poller()
        poller.register(sub, zmq.POLLIN)
        until = time.monotonic() + 120
        got = None
        while got is None and time.monotonic() < until and publisher.poll() is None:
            if poller.poll(200):
                got = sub.recv_multipart()
        out, err = publisher.communicate(timeout=120)
    finally:
        if publisher.poll() is None:
            publisher.kill()
        sub.close(linger=0)
    assert publisher.returncode == 0, out + err
    assert got is not None and len(got) == 3, "a batch reached the bound subscriber"
