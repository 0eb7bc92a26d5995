"""Dynamo's standalone indexer as a process: started, asked over HTTP, stopped.

``python -m dynamo.indexer`` subscribes to a vLLM ZMQ stream itself (nothing is
translated: it reads vLLM's wire) and answers ``POST /query`` with ``{"model_name",
"token_ids"}``: the leading tokens each worker holds (whole blocks, by its own hash of the
tokens), per worker and data-parallel rank. Its
``/metrics`` count every event it applied, by type and status (``ok``,
``parent_block_not_found``, ``block_not_found``, ...).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Sequence

from ...consumers.protocol import ConsumerError
from ...consumers.router import PROTOCOL, Prompt, Wire

MODEL = "default"
WORKER = 1
#: How long the process may take to answer its first request, and any one request.
START_SECONDS = 30.0
REQUEST_SECONDS = 5.0
#: Lines of its log (at ``DYN_LOG=warn``) counted, by the name given them in results.
WARNINGS = {
    "batch/undecodable": "Failed to decode KvEventBatch",
    "batch/gap": "Gap detected",
}
#: How much of its log is read.
LOG_BYTES = 16 * 1024 * 1024
APPLIED = re.compile(
    r'^dynamo_kvrouter_kv_cache_events_applied\{event_type="(\w+)",status="(\w+)"\} (\d+)',
    re.MULTILINE,
)


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive TCP ports free on loopback now (a publisher of
    data-parallel rank ``r`` binds its base port plus ``r``)."""
    for _ in range(50):
        first = free_port()
        if all(_is_free(first + r) for r in range(1, count)):
            return first
    raise ConsumerError(f"no {count} consecutive free ports on loopback")


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def workers_option(endpoints: Sequence[str]) -> str:
    """``--workers``: worker 1, one data-parallel rank per endpoint (``1=A,1:1=B``), as
    one vLLM engine with data parallelism publishes: rank ``r`` on its own port."""
    return ",".join(
        f"{WORKER}={endpoint}" if rank == 0 else f"{WORKER}:{rank}={endpoint}"
        for rank, endpoint in enumerate(endpoints)
    )


class IndexerProcess:
    """One ``dynamo.indexer`` process subscribed to ``endpoints`` (worker 1, rank ``r``
    reading ``endpoints[r]``)."""

    def __init__(self, endpoints: Sequence[str], block_size: int) -> None:
        self.port = free_port()
        self.block_size = block_size
        self.ranks = len(endpoints)
        self.base = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "dynamo.indexer", "--block-size", str(block_size),
            "--port", str(self.port), "--threads", "1", "--workers", workers_option(endpoints),
        ]  # fmt: skip
        # its warnings go to a file (a pipe nobody reads could fill and stall it): what it
        # could not decode is counted from there, as /metrics counts only decoded events
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env={"DYN_LOG": "warn", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
        )
        self._wait_ready()

    def _get(self, path: str) -> str:
        with urllib.request.urlopen(self.base + path, timeout=REQUEST_SECONDS) as reply:
            return str(reply.read().decode())

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                problem = self._log_text()[-400:]
                self.log.close()
                raise ConsumerError(f"Dynamo's indexer exited at start: {problem.strip()}")
            try:
                workers = json.loads(self._get("/workers"))
            except (urllib.error.URLError, ConnectionError, ValueError):
                time.sleep(0.1)
                continue
            listeners = [w.get("listeners", {}) for w in workers if isinstance(w, dict)]
            active = [one for ls in listeners for one in ls.values() if isinstance(one, dict)]
            if sum(one.get("status") == "active" for one in active) >= self.ranks:
                time.sleep(0.5)  # the subscription reaches the publisher (ZMQ's slow join)
                return
            time.sleep(0.1)
        self.stop()
        raise ConsumerError(f"Dynamo's indexer did not answer within {START_SECONDS:g} s")

    def _log_text(self) -> str:
        self.log.seek(0)
        return self.log.read(LOG_BYTES).decode(errors="replace")

    def warnings(self) -> Counter[str]:
        """What its log says it could not take, by kind (:data:`WARNINGS`)."""
        text = self._log_text()
        return Counter({kind: text.count(line) for kind, line in WARNINGS.items()})

    def applied(self) -> Counter[tuple[str, str]]:
        """Events it has taken, by ``(event type, status)``."""
        counts: Counter[tuple[str, str]] = Counter()
        for kind, status, n in APPLIED.findall(self._get("/metrics")):
            counts[(kind, status)] += int(n)
        return counts

    def wait_applied(self, events: int, seconds: float = 3.0) -> bool:
        """Whether it has taken ``events`` events (applied or dropped) within ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if sum(self.applied().values()) >= events:
                return True
            time.sleep(0.02)
        return False

    def held_blocks(self, token_ids: Sequence[int], rank: int = 0) -> int:
        """The leading blocks of ``token_ids`` it believes worker 1's rank ``rank`` holds."""
        body = json.dumps({"model_name": MODEL, "token_ids": list(token_ids)}).encode()
        request = urllib.request.Request(
            self.base + "/query", body, {"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as reply:
            answer = json.loads(reply.read().decode())
        # {"scores": {"<worker>": {"<dp rank>": matched tokens}}, ...}: tokens, not blocks
        scores = answer.get("scores", {}) if isinstance(answer, dict) else {}
        ranks = scores.get(str(WORKER), {}) if isinstance(scores, dict) else {}
        tokens = ranks.get(str(rank), 0) if isinstance(ranks, dict) else 0
        if not isinstance(tokens, int):
            raise ConsumerError(f"Dynamo's indexer answered {answer!r}: no token count")
        return tokens // self.block_size

    def stop(self) -> None:
        """Stop the process (by its pid); a second call does nothing."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class DynamoIndexer:
    """Dynamo's indexer process as a protocol 2 router (``--consumer dynamo-indexer``): it
    reads each rank's publisher itself and is asked with the prompt's tokens, rank by rank.
    It reports events counted (its ``/metrics``), not the last batch applied: route-check
    waits on :meth:`IndexerProcess.wait_applied` with the events it published."""

    name = "dynamo-indexer"
    protocol = PROTOCOL
    feeds = "wire"
    resets = "new-worker"
    ranks = "per-rank"

    def __init__(self) -> None:
        self.process: IndexerProcess | None = None

    def start(self, wire: Wire) -> None:
        self.process = IndexerProcess(wire.publishers, wire.block_size)

    def credited(self, prompt: Prompt) -> dict[int, int]:
        if self.process is None:
            raise ConsumerError("Dynamo's indexer was asked before it started")
        return {r: self.process.held_blocks(prompt.tokens, r) for r in range(self.process.ranks)}

    def close(self) -> None:
        if self.process is not None:
            self.process.stop()
