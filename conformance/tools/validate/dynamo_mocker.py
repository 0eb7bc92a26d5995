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
        [--max-tokens M] [REQUESTS] LOG RECORDING

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


def _mocker_command() -> list[str]:
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
        str(KV_EVENTS_PORT),
        "--zmq-replay-ports",
        str(REPLAY_PORT),
        "--speedup-ratio",
        "0",
        "--num-gpu-blocks-override",
        str(USABLE_BLOCKS),
        "--block-size",
        str(BLOCK_SIZE),
        "--engine-type",
        "vllm",
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


async def _answered(client: Any, body: dict[str, Any]) -> Answer:
    stream = await client.round_robin(body)
    return _answer([item async for item in stream])


async def _send(
    requests: tuple[LoggedRequest, ...],
    recorder: Recorder,
    max_tokens: int,
    process: subprocess.Popen[bytes],
) -> list[LoggedRequest]:
    """Each request sent in turn, its stream recorded until quiet; the requests as run."""
    from dynamo._core import DistributedRuntime

    loop = asyncio.get_running_loop()
    runtime = DistributedRuntime(loop, "file", "tcp", event_plane="zmq")
    try:
        client = await runtime.endpoint(ENDPOINT).client()
        await _watched(
            client.wait_for_instances(), process, START_SECONDS, f"registered {ENDPOINT}"
        )
        subscriber = Subscriber([f"tcp://127.0.0.1:{KV_EVENTS_PORT}"], "")
        await asyncio.sleep(1.0)  # the subscription reaches the publisher
        ran: list[LoggedRequest] = []
        for asked in requests:
            body: dict[str, Any] = {
                "token_ids": list(asked.prompt),
                "stop_conditions": {"max_tokens": max_tokens, "ignore_eos": True},
                "sampling_options": {},
                "output_options": {},
                "eos_token_ids": [],
                "annotations": [],
            }
            sent = time.time()
            what = f"answered request {asked.request_id!r}"
            answer = await _watched(_answered(client, body), process, ANSWER_SECONDS, what)
            done = time.time()
            while (frames := subscriber.receive(QUIET_SECONDS)) is not None:
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
        return ran
    finally:
        runtime.shutdown()


def run(
    requests: tuple[LoggedRequest, ...],
    log_path: Path,
    recording: Path,
    max_tokens: int = MAX_TOKENS,
) -> None:
    """Start the mocker, run ``requests`` on it and write both files; stop it by its pid.
    Call inside the network namespace (see :func:`main`)."""
    mocker_log = recording.with_name(recording.name + ".mocker.log")
    with tempfile.TemporaryDirectory(prefix="kvpool-mocker-") as folder:
        env = _loopback_env(Path(folder, "discovery"))
        os.environ.update(env)  # this process's runtime finds the mocker the same way
        with mocker_log.open("wb") as out:
            process = subprocess.Popen(
                _mocker_command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent,
            )
        recorder = Recorder(recording, [f"tcp://127.0.0.1:{KV_EVENTS_PORT}"])
        try:
            ran = asyncio.run(_send(requests, recorder, max_tokens, process))
        except MockerError as exc:
            raise MockerError(f"{exc}\n{_tail(mocker_log)}") from None
        except Exception as exc:  # the runtime raises the base class for its own failures
            raise MockerError(f"the mocker failed: {exc}\n{_tail(mocker_log)}") from None
        finally:
            recorder.close()
            _stop(process)
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
    return f"the mocker's log ({path}), last lines:\n" + "\n".join(text.splitlines()[-lines:])


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
    parser.add_argument("paths", nargs="+", metavar="[REQUESTS] LOG RECORDING")
    args = parser.parse_args(argv)
    if len(args.paths) not in (2, 3):
        parser.error("give LOG RECORDING, or REQUESTS LOG RECORDING")
    if args.max_tokens < 1:
        parser.error("--max-tokens must be at least 1")
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
        run(requests, Path(args.paths[-2]), Path(args.paths[-1]), args.max_tokens)
    except MockerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
