"""Two campaigns share a failure through a real Redis server: the first finds the planted
fault and stores it; the second, a separate process with nothing stored locally, replays
it from Redis before drawing a test case of its own. Without Redis it does not."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_helpers import PLANTED, fuzz_command

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
TARGET = "faulty_pools:TouchForgetsQueue"
KEY = f"hypothesis-example:kvpool-fuzz/v2/{TARGET}/seed/pool/safety/blocks=8"
REPLAYED = "by worker 1 replaying the example database, before drawing a test case"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A throwaway redis-server (no persistence) on a free port."""
    if not Path(REDIS_SERVER).exists():
        if os.environ.get("KVPOOL_REQUIRE_REDIS"):
            pytest.fail(f"KVPOOL_REQUIRE_REDIS is set but {REDIS_SERVER} is missing")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    import redis

    port = _free_port()
    server = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=10)


def campaign(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One campaign of one worker on the planted fault, in its own directory (its own local
    database and traces), as a separate process."""
    where.mkdir()
    return subprocess.run(
        fuzz_command(
            "--target", TARGET, "--machine", "pool", "--level", "safety",
            "--workers", "1", "--seconds", "30", "--stop-on-failure", "--seed", "1",
            *args,
        ),
        cwd=where,
        env={**os.environ, "PYTHONPATH": str(PLANTED)},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


def test_a_failure_found_by_one_campaign_replays_first_in_another(
    redis_url: str, tmp_path: Path
) -> None:
    import redis

    first = campaign(tmp_path / "first", "--redis", redis_url)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "FOUND pool/safety" in first.stdout
    assert REPLAYED not in first.stdout, "nothing was stored yet"
    stored = redis.Redis.from_url(redis_url).smembers(KEY)
    assert len(stored) == 1, "the failing example is in Redis, under the job's key"

    second = campaign(tmp_path / "second", "--redis", redis_url)
    assert second.returncode == 1, second.stdout + second.stderr
    assert REPLAYED in second.stdout, second.stdout
    assert "after touch: free count" in second.stdout
    # it ran replay rounds only: not one round drawing test cases of its own
    assert re.search(r"│ pool/safety │\s+0 │\s+[1-9]", second.stdout), second.stdout
    assert list((tmp_path / "second" / "kvpool-traces").glob("*.itf.json"))

    alone = campaign(tmp_path / "alone")  # the same, without Redis: it must draw its own
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert REPLAYED not in alone.stdout
    assert "drawing test cases" in alone.stdout
