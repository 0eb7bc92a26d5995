"""vllm-router (the Rust router, ``vllm-router==0.1.17``, the extra ``[vllm-router]``) as a
protocol 2 router (``--consumer vllm-router``), run as it is deployed.

At :meth:`VllmRouter.start` the suite starts, on loopback: a fake worker (the one whose
stream is published) and a decoy worker (:mod:`.fake_workers`), and ``vllm-router
--policy kv_aware`` with the worker's static event sources (``--kv-event-source
URL=EP0,EP1,...``, one endpoint per data-parallel rank), its replay endpoints
(``--kv-event-replay-source``), the block size and the model. vllm-router subscribes to
the publisher itself: nothing is translated.

A worker with more than one rank is deployed as vllm-router is told of data-parallel
workers: ``--intra-node-data-parallel-size N`` (each worker becomes ``URL@0`` ..
``URL@N-1``, one routing target per rank, each scored on its own rank's blocks) and the
``--api-key`` that option requires (the key it sends its workers: a random one made per
start, kept out of everything the suite reports; the fake workers require it on their
``/v1/`` endpoints, as a vLLM server started with that key does, and the suite's own
requests carry it, as a client's would). Without that option vllm-router indexes
every rank but routes only to rank 0, and loses the prompts another rank holds more of.
So it declares ``ranks = "picks-rank"``: per prompt it picks one rank and credits it.

Asked about a prompt, the suite sends it as a completion request; vllm-router asks every
worker's ``/v1/completions/render`` for the token ids, hashes them itself, and logs its
decision (``KV prefix decision ... worker=URL[@RANK] ... credited_prefix_tokens=N``, at
debug). The decoy holds nothing, so the router picks the worker whenever it credits it
with anything: a decision for the worker gives its credit to the rank it names (rank 0
when it names none), one for the decoy no credit. Its watermark is the last
``kv_index live sequence advanced ... rank=R seq=N`` line per rank. Every process and
server it starts is stopped by :meth:`close`.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from ..install import extra_hint
from .fake_workers import FakeWorker, prompt_text
from .protocol import ConsumerError
from .router import PROTOCOL, Prompt, Wire

PACKAGE = "vllm-router"
TESTED_RELEASE = "0.1.17"
INSTALL = f"pip install '{PACKAGE}=={TESTED_RELEASE}' (or {extra_hint('vllm-router')})"
START_SECONDS = 30.0
REQUEST_SECONDS = 10.0
#: How long a decision line may take to reach the log after the reply.
DECISION_SECONDS = 5.0
LOG_BYTES = 64 * 1024 * 1024
#: Linux's prctl option: the signal a process gets when its parent ends.
PR_SET_PDEATHSIG = 1
ANSI = re.compile(r"\x1b\[[0-9;]*m")
DECISION = re.compile(
    r'KV prefix decision .*?worker="?([^" @]+)(?:@(\d+))?"? .*?credited_prefix_tokens=(\d+)'
)
#: What the router's API key is shown as in any of its log the suite reports.
HIDDEN_KEY = "<api-key>"
SEQUENCE = re.compile(r"kv_index live sequence advanced .*?rank=(\d+) seq=(\d+)")
#: Its log lines for a batch it refused (it does not advance its sequence past one).
REFUSED = re.compile(r"kv_index decode batch: |kv_index dense batch rejected")
#: Either, in log order.
WATERMARK = re.compile(f"{SEQUENCE.pattern}|{REFUSED.pattern}")
#: What its log says when it refuses a batch (counted, by kind, in :meth:`warnings`).
WARNINGS = {
    "batch/empty-hashes": "KV event hashes must be a nonempty array",
    "batch/undecodable": "kv_index decode batch",
}


def _end_with_parent() -> None:
    """In the router's process before it runs: the kernel ends it when the suite's process
    ends, however that happens (Linux's ``PR_SET_PDEATHSIG``; elsewhere :meth:`close`
    alone stops it)."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return


def find_binary() -> str:
    """The ``vllm-router`` launcher beside this interpreter (or on PATH); a
    :class:`ConsumerError` with the install line when it is missing or cannot run."""
    beside = Path(sys.executable).with_name("vllm-router")
    found = str(beside) if beside.exists() else shutil.which("vllm-router")
    if found is None:
        raise ConsumerError(f"the vllm-router consumer needs the router: {INSTALL}")
    return found


class VllmRouter:
    """One vllm-router process and its two fake workers, for one stream."""

    name = "vllm-router"
    protocol = PROTOCOL
    feeds = "wire"
    resets = "clear"
    ranks = "picks-rank"
    #: Its lookups are token-only and ask group 0 (``group_idx: 0``).
    groups = (0,)

    def __init__(self) -> None:
        self.binary = find_binary()
        self.process: subprocess.Popen[bytes] | None = None
        self.workers: list[FakeWorker] = []
        self.log_file: tempfile._TemporaryFileWrapper[bytes] | None = None
        self.block_size = 16
        self.model = "default"
        self.url = ""
        self._read = 0
        self._text = ""
        self._key = ""

    def start(self, wire: Wire) -> None:
        from ..tools.routes.indexer import free_port

        self.block_size, self.model = wire.block_size, wire.model
        self._key = secrets.token_urlsafe(24) if wire.ranks > 1 else ""
        key = self._key or None
        self.workers = [FakeWorker(wire.model, key), FakeWorker(wire.model, key)]
        worker, decoy = (w.url for w in self.workers)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        command = [
            self.binary, "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
            "--worker-urls", worker, decoy, "--policy", "kv_aware",
            "--kv-event-source", f"{worker}={','.join(wire.publishers)}",
            "--kv-event-block-size", str(wire.block_size), "--kv-event-model", wire.model,
            "--worker-startup-check-interval", "1", "--log-level", "debug",
        ]  # fmt: skip
        if wire.replays:
            command += ["--kv-event-replay-source", f"{worker}={','.join(wire.replays)}"]
        if wire.ranks > 1:
            command += ["--intra-node-data-parallel-size", str(wire.ranks), "--api-key", self._key]
        self.log_file = tempfile.NamedTemporaryFile(prefix="vllm-router-", suffix=".log")  # noqa: SIM115 (closed by close())
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1"}
        self.process = subprocess.Popen(
            command,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_end_with_parent,
        )
        self._wait_ready(wire.ranks)

    def _wait_ready(self, ranks: int) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                tail = self._log()[-600:].strip()
                self.close()
                raise ConsumerError(f"vllm-router exited at start: {tail}")
            text = self._log()
            if "Starting server on" in text and text.count("kv_index subscriber for") >= ranks:
                time.sleep(0.5)  # the subscription reaches the publisher (ZMQ's slow join)
                return
            time.sleep(0.1)
        self.close()
        raise ConsumerError(f"vllm-router was not ready within {START_SECONDS:g} s")

    def _log(self) -> str:
        """Its log so far (read on from where the last call stopped)."""
        if self.log_file is None:
            return self._text
        with open(self.log_file.name, "rb") as log:
            log.seek(self._read)
            new = log.read(LOG_BYTES - len(self._text))
        self._read += len(new)
        # the key hidden, also where it was split between two reads
        start = max(0, len(self._text) - len(self._key))
        self._text += ANSI.sub("", new.decode(errors="replace"))
        if self._key:
            self._text = self._text[:start] + self._text[start:].replace(self._key, HIDDEN_KEY)
        return self._text

    def applied(self) -> Mapping[int, int]:
        """Per rank, its last ``live sequence advanced``, plus one for each batch it said
        it refused after that line (a refused batch is taken, and its sequence is never
        applied: a watermark of applied batches alone would wait on it for ever). A
        refusal is counted for rank 0 (its log line names no rank)."""
        last: dict[int, int] = {}
        for found in WATERMARK.finditer(self._log()):
            rank, seq = found.group(1), found.group(2)
            if rank is None:
                last[0] = last.get(0, -1) + 1
            else:
                last[int(rank)] = int(seq)
        return last

    def warnings(self) -> dict[str, int]:
        text = self._log()
        return {kind: text.count(line) for kind, line in WARNINGS.items()}

    def credited(self, prompt: Prompt) -> Mapping[int, int]:
        before = len(DECISION.findall(self._log()))
        body = {"model": self.model, "prompt": prompt_text(prompt.tokens), "max_tokens": 1}
        headers = {"content-type": "application/json"}
        if self._key:
            headers["authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(
            self.url + "/v1/completions", json.dumps(body).encode(), headers
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as reply:
                reply.read()
        except (urllib.error.URLError, OSError) as exc:
            raise ConsumerError(f"vllm-router did not route a request: {exc}") from exc
        deadline = time.monotonic() + DECISION_SECONDS
        while True:
            decisions = DECISION.findall(self._log())
            if len(decisions) > before:
                break
            if time.monotonic() > deadline:
                raise ConsumerError("vllm-router routed a request but logged no KV decision")
            time.sleep(0.01)
        worker, rank, tokens = decisions[before]
        if worker != self.workers[0].url:
            return {}  # the decoy: the worker is credited with nothing
        return {int(rank or 0): int(tokens) // self.block_size}

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        for worker in self.workers:
            worker.stop()
        self.workers = []
        if self.log_file is not None:
            self._log()
            self.log_file.close()
            self.log_file = None
