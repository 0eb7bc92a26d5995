"""NVIDIA Dynamo's mocker as an engine for ``kvpool validate``: it is started, sent
requests, recorded and stopped here, and its request log and KV-event recording written
as any engine's would be.

The mocker (``python -m dynamo.mocker``, extra ``[dynamo-mocker]``) simulates vLLM's,
SGLang's and TensorRT-LLM's KV caches without a GPU or a model. It is started with file
discovery, the TCP request plane and its ZMQ event plane, no etcd, NATS, tokenizer or
model; requests carry token ids and go straight to its worker endpoint
(``dynamo.backend.generate``), one at a time, and its ZMQ KV-event stream is recorded in
the monitor's format, waiting for the stream to settle (:data:`QUIET_SECONDS` without a
message) before the next request.

The mocker binds its ZMQ sockets on every interface (there is no setting for their host),
so the run happens inside a network namespace of its own holding only loopback
(``unshare --net``): nothing it opens is reachable from outside the machine, and runs side
by side do not share ports. The mocker is stopped by its pid (and dies with this process);
its log is kept beside the recording (``RECORDING.mocker.log``), so a crash is reported
with it.

    python -m kvpool.conformance.tools.validate.dynamo_mocker [--seed N] [--requests K]
        [--max-tokens M] [--host-blocks H] [REQUESTS] LOG RECORDING

With ``REQUESTS`` (a request log: its prompts are sent; a salt is refused, as the driver
sends none) it is a driver for
``kvpool validate --rerun``; without, it sends ``K`` requests drawn from ``--seed`` (the
same drawing as :mod:`.impl_engine`'s). Exit 0: both files written; 2: the mocker is not
installed, cannot be isolated, or failed (its log's tail on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ...install import extra_hint
from ..routes.isolation import IsolationError, inside, run_in_namespace
from ..stream.recording import Recorder
from ..stream.subscriber import Subscriber
from .impl_engine import BLOCK_SIZE, drawn_requests
from .request_log import LogError, LoggedRequest, RequestLog, read_log, write_log

INSTALL = (
    f"{extra_hint('dynamo-mocker')} (where pypi.nvidia.com, which its aisimulate stub "
    "downloads from, cannot be reached: pip install --no-deps ai-dynamo==1.6.1)"
)
#: The mocker's request endpoint (its default for an aggregated worker).
ENDPOINT = "dynamo.backend.generate"
#: Usable blocks the mocker is given (vLLM's pool of this size has one more: the null block).
USABLE_BLOCKS = 47
#: Tokens generated per request by default: one, whose KV is never computed (vLLM computes
#: that of every sampled token but the last). The mocker's events name generated positions
#: by token ids other than those it answers (``--max-tokens 3`` shows it, as a presence
#: difference), so with more a block holding them cannot be matched to the spec's.
MAX_TOKENS = 1
#: Seconds without a message after which a request's events are taken to be all in.
QUIET_SECONDS = 0.4
#: Seconds the mocker has to register its endpoint, and to answer a request.
START_SECONDS = 90.0
ANSWER_SECONDS = 60.0
#: KV bytes per token the mocker is told when it has a host tier (it sizes host blocks).
KV_BYTES_PER_TOKEN = 1024
#: Seconds a failed request waits for the mocker's exit status.
EXIT_SECONDS = 1.0
#: Who runs what in a network namespace, for its errors.
WHO = "the mocker's driver runs the mocker"
KV_EVENTS_PORT = 5557
REPLAY_PORT = 5558
PR_SET_PDEATHSIG = 1
T = TypeVar("T")


class MockerError(Exception):
    """The mocker could not be run; the message says why (and holds its log's tail)."""


def installed() -> bool:
    """Whether ``dynamo.mocker`` and the runtime it needs can be imported."""
    try:
        return all(
            importlib.util.find_spec(m) is not None for m in ("dynamo._core", "dynamo.mocker")
        )
    except ImportError:  # no ``dynamo`` package at all
        return False


@dataclass(frozen=True)
class Answer:
    """What the mocker sent back for one request."""

    generated: tuple[int, ...]
    cached_tokens: int | None


def _die_with_parent() -> None:
    """In the mocker's process before it starts: it gets SIGTERM when this one dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _mocker_command(
    events_port: int = KV_EVENTS_PORT,
    replay_port: int = REPLAY_PORT,
    block_size: int = BLOCK_SIZE,
    usable_blocks: int = USABLE_BLOCKS,
    host_blocks: int = 0,
) -> list[str]:
    host = ["--num-host-blocks", str(host_blocks), "--kv-bytes-per-token", str(KV_BYTES_PER_TOKEN)]
    return [
        sys.executable,
        "-m",
        "dynamo.mocker",
        "--discovery-backend",
        "file",
        "--request-plane",
        "tcp",
        "--event-plane",
        "zmq",
        "--zmq-kv-events-ports",
        str(events_port),
        "--zmq-replay-ports",
        str(replay_port),
        "--speedup-ratio",
        "0",
        "--num-gpu-blocks-override",
        str(usable_blocks),
        "--block-size",
        str(block_size),
        "--engine-type",
        "vllm",
        *(host if host_blocks else []),
    ]


def _loopback_env(discovery: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DYN_FILE_KV=str(discovery),
        DYN_TCP_RPC_HOST="127.0.0.1",
        DYN_TCP_RESPONSE_STREAM_HOST="127.0.0.1",
        DYN_EVENT_PLANE_HOST="127.0.0.1",
        DYN_SYSTEM_HOST="127.0.0.1",
    )
    return env


def _answer(items: list[Any]) -> Answer:
    generated: list[int] = []
    cached = None
    for item in items:
        data = item.data() if hasattr(item, "data") else item
        if not isinstance(data, dict):
            raise MockerError(f"the mocker answered {data!r}, not an output")
        generated.extend(int(t) for t in data.get("token_ids") or ())
        usage = data.get("completion_usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            cached = int(details["cached_tokens"])
    return Answer(tuple(generated), cached)


async def _watched(
    work: Coroutine[Any, Any, T], process: subprocess.Popen[bytes], seconds: float, what: str
) -> T:
    """``work``'s result; :class:`MockerError` if the mocker exits or ``seconds`` pass first."""
    task = asyncio.ensure_future(work)
    deadline = time.monotonic() + seconds
    while not task.done():
        await asyncio.wait([task], timeout=0.2)
        if task.done():
            break
        status = process.poll()
        if status is not None or time.monotonic() > deadline:
            task.cancel()
            if status is not None:
                raise MockerError(f"the mocker exited (status {status}) before it {what}")
            raise MockerError(f"the mocker had not {what} after {seconds:.0f} s")
    return task.result()


def _body(prompt: tuple[int, ...], max_tokens: int) -> dict[str, Any]:
    """A request to the worker endpoint: token ids, no sampling, ``max_tokens`` generated."""
    return {
        "token_ids": list(prompt),
        "stop_conditions": {"max_tokens": max_tokens, "ignore_eos": True},
        "sampling_options": {},
        "output_options": {},
        "eos_token_ids": [],
        "annotations": [],
    }


async def _answered(client: Any, body: dict[str, Any]) -> Answer:
    stream = await client.round_robin(body)
    return _answer([item async for item in stream])


class Mocker:
    """One mocker process on loopback, a runtime client of its request endpoint and a
    subscriber of its KV-event stream: :meth:`send` runs a request, :meth:`settled` takes
    the messages it published. Started by :meth:`start` (or ``with``), stopped by its pid
    by :meth:`stop`; every failure, the mocker's exit included, is a :class:`MockerError`
    holding the last lines of its log. Used inside the network namespace only (it binds
    every interface): by the validate driver (:func:`run`) and by route-check
    (:mod:`kvpool.conformance.tools.routes.mocker_stream`)."""

    def __init__(
        self,
        log: Path,
        *,
        events_port: int = KV_EVENTS_PORT,
        replay_port: int = REPLAY_PORT,
        block_size: int = BLOCK_SIZE,
        usable_blocks: int = USABLE_BLOCKS,
        host_blocks: int = 0,
    ) -> None:
        self.log = log
        self.events_port = events_port
        self.command = _mocker_command(
            events_port, replay_port, block_size, usable_blocks, host_blocks
        )
        self.process: subprocess.Popen[bytes] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runtime: Any = None
        self._client: Any = None
        self._subscriber: Subscriber | None = None

    def __enter__(self) -> Mocker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the mocker and wait until its endpoint is registered and subscribed to."""
        self._folder = tempfile.TemporaryDirectory(prefix="kvpool-mocker-")
        env = _loopback_env(Path(self._folder.name, "discovery"))
        os.environ.update(env)  # this process's runtime finds the mocker the same way
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent,
            )
        self._loop = asyncio.new_event_loop()
        try:
            self._client = self._run(self._connect())
            self._subscriber = Subscriber([f"tcp://127.0.0.1:{self.events_port}"], "")
            time.sleep(1.0)  # the subscription reaches the publisher
        except BaseException:
            self.stop()
            raise

    async def _connect(self) -> Any:
        from dynamo._core import DistributedRuntime

        assert self.process is not None
        loop = asyncio.get_running_loop()
        self._runtime = DistributedRuntime(loop, "file", "tcp", event_plane="zmq")
        client = await self._runtime.endpoint(ENDPOINT).client()
        what = f"registered {ENDPOINT}"
        await _watched(client.wait_for_instances(), self.process, START_SECONDS, what)
        return client

    def send(self, request_id: str, prompt: tuple[int, ...], max_tokens: int) -> Answer:
        """Run one request on the mocker; what it answered."""
        assert self.process is not None
        what = f"answered request {request_id!r}"
        work = _answered(self._client, _body(prompt, max_tokens))
        return self._run(_watched(work, self.process, ANSWER_SECONDS, what))

    def send_at_once(self, prompts: list[tuple[int, ...]], max_tokens: int) -> list[Answer]:
        """Send ``prompts`` together (the mocker schedules them side by side, as a served
        burst); what it answered to each. Not used to judge a stream (the spec's replay
        runs one request at a time): it is how the mocker's host tier was made to panic."""
        assert self.process is not None

        async def together() -> list[Answer]:
            return list(
                await asyncio.gather(
                    *(_answered(self._client, _body(p, max_tokens)) for p in prompts)
                )
            )

        what = f"answered {len(prompts)} requests sent at once"
        return self._run(_watched(together(), self.process, ANSWER_SECONDS, what))

    def settled(self) -> list[list[bytes]]:
        """The messages the mocker published since the last call, taken until none comes
        for :data:`QUIET_SECONDS`; a :class:`MockerError` if it has exited meanwhile."""
        assert self._subscriber is not None and self.process is not None
        messages = []
        while (frames := self._subscriber.receive(QUIET_SECONDS)) is not None:
            messages.append(frames)
        status = self.process.poll()
        if status is not None:
            raise MockerError(f"the mocker exited (status {status}) while publishing")
        return messages

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        try:
            return self._loop.run_until_complete(work)
        except MockerError as exc:
            raise MockerError(f"{exc}\n{self.tail()}") from None
        except Exception as exc:  # the runtime raises the base class for its own failures
            status = self._exit_status()
            how = "failed" if status is None else f"exited (status {status})"
            raise MockerError(f"the mocker {how}: {exc}\n{self.tail()}") from None

    def _exit_status(self) -> int | None:
        """The mocker's exit status, waiting a moment for one that is going (a request it
        dropped by dying fails before it is reaped); ``None`` while it runs."""
        assert self.process is not None
        try:
            return self.process.wait(EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            return None

    def tail(self, lines: int = 15) -> str:
        """The last lines of the mocker's log, to show with an error."""
        return _tail(self.log, lines)

    def stop(self) -> None:
        """Stop the mocker by its pid and close what talks to it (idempotent)."""
        if self._subscriber is not None:
            self._subscriber.close()
            self._subscriber = None
        if self._runtime is not None:
            self._runtime.shutdown()
            self._runtime = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self.process is not None:
            _stop(self.process)
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


def run(
    requests: tuple[LoggedRequest, ...],
    log_path: Path,
    recording: Path,
    max_tokens: int = MAX_TOKENS,
    host_blocks: int = 0,
) -> None:
    """Start the mocker, run ``requests`` on it one at a time (each request's stream
    recorded until quiet) and write both files; stop it by its pid. Call inside the
    network namespace (see :func:`main`)."""
    ran: list[LoggedRequest] = []
    recorder = Recorder(recording, [f"tcp://127.0.0.1:{KV_EVENTS_PORT}"])
    mocker_log = recording.with_name(recording.name + ".mocker.log")
    try:
        with Mocker(mocker_log, host_blocks=host_blocks) as mocker:
            for asked in requests:
                sent = time.time()
                answer = mocker.send(asked.request_id, asked.prompt, max_tokens)
                done = time.time()
                for frames in mocker.settled():
                    recorder.record(frames, "live")
                ran.append(
                    LoggedRequest(
                        asked.request_id,
                        asked.prompt,
                        None,
                        answer.generated[:-1],
                        answer.cached_tokens,
                        sent,
                        done,
                    )
                )
    finally:
        recorder.close()
    log = RequestLog("dynamo-mocker 1.6.1 (vllm)", BLOCK_SIZE, USABLE_BLOCKS + 1, tuple(ran))
    with log_path.open("w", encoding="utf-8") as out:
        write_log(out, log)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no mocker log at {path})"
    every = text.splitlines()
    last = every[-lines:]
    # a panic of one of its threads leaves the process up, logging on (its backtrace
    # too): the first panic's line and its message are shown
    first = next((i for i, line in enumerate(every) if "panicked at" in line), None)
    panic = (
        [] if first is None or first >= len(every) - lines else [*every[first : first + 2], "..."]
    )
    shown = [*panic, *last]
    return f"the mocker's log ({path}), last lines:\n" + "\n".join(shown)


def _requests(paths: list[str], seed: int, count: int) -> tuple[LoggedRequest, ...]:
    """The requests to send: the prompts of the request log ``paths[0]`` when three paths
    are given, else ``count`` drawn from ``seed``; :class:`LogError` for a log that cannot
    be read or asks for a cache salt (this driver sends none)."""
    if len(paths) == 2:
        return drawn_requests(seed, count)
    asked = read_log(Path(paths[0])).requests
    salted = next((r.request_id for r in asked if r.salt is not None), None)
    if salted is not None:
        raise LogError(f"{paths[0]}: request {salted!r} has a cache salt; this driver sends none")
    return tuple(LoggedRequest(r.request_id, r.prompt) for r in asked)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m kvpool.conformance.tools.validate.dynamo_mocker"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument(
        "--host-blocks",
        type=int,
        default=0,
        help="host-offload blocks (the mocker's --num-host-blocks; 0: no host tier)",
    )
    parser.add_argument("paths", nargs="+", metavar="[REQUESTS] LOG RECORDING")
    args = parser.parse_args(argv)
    if len(args.paths) not in (2, 3):
        parser.error("give LOG RECORDING, or REQUESTS LOG RECORDING")
    if args.max_tokens < 1:
        parser.error("--max-tokens must be at least 1")
    if args.host_blocks < 0:
        parser.error("--host-blocks must be at least 0")
    if not installed():
        print(f"error: Dynamo's mocker is not installed: {INSTALL}", file=sys.stderr)
        return 2
    try:
        requests = _requests(args.paths, args.seed, args.requests)
    except LogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not inside():
        command = [sys.executable, "-m", __spec__.name if __spec__ else __name__, *argv]
        try:
            return run_in_namespace(command, WHO, _die_with_parent)
        except IsolationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        run(
            requests,
            Path(args.paths[-2]),
            Path(args.paths[-1]),
            args.max_tokens,
            args.host_blocks,
        )
    except MockerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
