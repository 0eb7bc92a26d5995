"""``kvpool publish``: a target's KV events on a real ZMQ endpoint, through vLLM's own
publisher."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

import click
from kvpool.spec import Observation, PoolConfig, TakeEvents, get_profile
from kvpool.spec import events as spec_events
from kvpool.spec.manager import ManagerConfig, ManagerResult, RequestAction
from rich.console import Console
from rich.table import Table

from ...engines.vllm.isolation import IsolationError
from ...engines.vllm.releases import ReleaseError
from ...machines.pool.lockstep import Nonconformance, RunRecord
from ...machines.requests.pool_run import PoolRequestRun
from ...machines.requests.target import RequestSetup
from ...machines.requests.workload import Workload, WorkloadParams
from ...run_options import blocks_option, seed_option
from ...targets.description import TargetDescription
from ...targets.loading import TargetLoadError, choose_profile, load_target
from ...targets.options import TARGET
from ...usage import EXIT_FINDING, EXIT_PASS, fail_usage
from .publisher import (
    ALL_INTERFACES,
    DEFAULT_RELEASE,
    LOOPBACK,
    EventTranslator,
    PublisherError,
    bind_host,
    load_publisher,
    on_interface,
    publisher_source,
)
from .publisher import start_publisher as start_vllm_publisher
from .twins import Twins


@click.command()
@click.option(
    "--target",
    "-t",
    default="impl",
    show_default=True,
    type=TARGET,
    help="The pool whose events are published: 'impl', 'vllm==X.Y.Z', 'module:factory'.",
)
@click.option(
    "--endpoint",
    default="tcp://*:5557",
    show_default=True,
    help="vLLM's PUB address: tcp://*:PORT binds (on the --bind interface, loopback by "
    "default; subscribers connect to tcp://HOST:PORT); tcp://HOST:PORT connects to a "
    "subscriber that binds there (nothing listens).",
)
@click.option(
    "--bind",
    default=LOOPBACK,
    show_default=True,
    metavar="HOST|tcp://HOST:PORT",
    help="The interface the wildcard endpoints (tcp://*:PORT) are bound on: loopback by "
    "default, '*' for every interface (as vLLM binds them). tcp://HOST:PORT binds the PUB "
    "endpoint there (the replay endpoint's port on the same interface). Binding anything "
    "but loopback takes this flag, naming that interface or '*'.",
)
@click.option(
    "--replay-endpoint",
    default="tcp://*:5558",
    show_default=True,
    help="vLLM's replay ROUTER address (always bound: tcp://*:PORT on the --bind "
    "interface; an address off loopback only with --bind naming it); 'none' for no "
    "replay socket.",
)
@click.option("--topic", default="", show_default=True, help="The topic frame of every message.")
@click.option(
    "--rate",
    default=100.0,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Batches per second at most (0: as fast as the target runs).",
)
@click.option("--requests", "-r", default=100, show_default=True, type=click.IntRange(1))
@seed_option(0, "The workload's seed.")
@click.option("--prefixes", default=6, show_default=True, type=click.IntRange(1))
@click.option(
    "--twins",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Send the first N prompts twice at once (two requests admitted together), so "
    "the pool caches each of those prefixes in two blocks.",
)
@click.option("--concurrency", default=6, show_default=True, type=click.IntRange(1))
@blocks_option(64, None, "Blocks in the pool (num_gpu_blocks, the null block included).")
@click.option("--block-size", default=16, show_default=True, type=click.IntRange(1))
@click.option("--hash-block-size", default=16, show_default=True, type=click.IntRange(1))
@click.option(
    "--publisher",
    "release",
    default=None,
    help="The vLLM release whose ZmqEventPublisher and event classes are used (default: "
    f"the target's own, vllm==X.Y.Z or vllm@TREE; else {DEFAULT_RELEASE}).",
)
@click.option(
    "--hashes",
    type=click.Choice(["release", "int", "bytes"]),
    default="release",
    show_default=True,
    help="How hashes go on the wire: the release's default (vLLM: the low 64 bits as an "
    "integer), or forced.",
)
@click.option(
    "--wait",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Seconds between binding and the first batch (subscribers connect).",
)
@click.option(
    "--hold",
    default=2.0,
    show_default=True,
    type=click.FloatRange(0.0),
    help="Seconds the replay socket stays up after the last batch (late subscribers).",
)
def publish(
    target: TargetDescription,
    endpoint: str,
    bind: str,
    replay_endpoint: str,
    topic: str,
    rate: float,
    requests: int,
    seed: int,
    prefixes: int,
    twins: int,
    concurrency: int,
    blocks: int,
    block_size: int,
    hash_block_size: int,
    release: str | None,
    hashes: str,
    wait: float,
    hold: float,
) -> None:
    """Publish a pool's KV events through vLLM's own ZMQ publisher.

    The seeded serving workload of `kvpool workload` (shared prefixes, multi-turn
    sessions, preemption) drives the target through the spec's manager, in lockstep with
    the spec's pool; after every request action the target's events become one
    `KVEventBatch` of the release's own classes (`BlockStored`, `BlockRemoved`,
    `AllBlocksCleared`), published by the release's `ZmqEventPublisher` (loaded from the
    wheel in isolation, no torch) with its replay socket. A KV-aware router, or `kvpool
    monitor`, subscribes as it would to a vLLM server: no GPU needed.

    Wildcard endpoints are bound on loopback unless --bind says otherwise.

    \b
    Two shells:
      kvpool publish --target vllm==0.33.0 --endpoint tcp://*:5557
      kvpool monitor --consumer set --replay tcp://127.0.0.1:5558 tcp://127.0.0.1:5557

    Exit 0 when the workload ran to its end, 1 if the target diverged from the spec on
    the way (its events are checked too), 2 on a usage error (unknown target, an address
    in use).
    """
    console = Console(stderr=True)

    def usage(message: str) -> None:
        fail_usage(console, message)

    if block_size % hash_block_size:
        usage("--block-size must be a multiple of --hash-block-size")
    try:
        factory, name = load_target(target)
        profile = get_profile(choose_profile(target).name)
        int_hashes = None if hashes == "release" else hashes == "int"
        source = release or publisher_source(target)
        loaded = load_publisher(source, int_hashes)
    except (TargetLoadError, ReleaseError, IsolationError, PublisherError, KeyError) as exc:
        usage(str(exc.args[0] if isinstance(exc, KeyError) else exc))
    setup = RequestSetup(
        ManagerConfig(block_size), PoolConfig(blocks, hash_block_size=hash_block_size)
    )
    run = PoolRequestRun(factory, profile, setup, RunRecord())
    if "take_events" not in run.lockstep.operations:
        usage(f"{name} publishes no KV events (it has no take_events)")
    translator = EventTranslator(loaded, run.setup.pool.hash_block_size)
    try:
        replay = None if replay_endpoint == "none" else replay_endpoint
        pub, replay, host = endpoints(endpoint, bind, replay)
        publisher = start_vllm_publisher(loaded, pub, replay, topic, bind=host)
    except PublisherError as exc:
        usage(str(exc))
    params = WorkloadParams(
        requests=requests, prefixes=prefixes, concurrency=concurrency, seed=seed
    )
    counts: Counter[str] = Counter()
    pace = 1.0 / rate if rate else 0.0
    last = [0.0]

    def apply(action: RequestAction) -> ManagerResult:
        result = run.apply(action)
        run.call(TakeEvents())
        observed = run.lockstep.last.actual
        assert isinstance(observed, Observation)
        events: tuple[spec_events.Event, ...] = observed.result  # type: ignore[assignment]
        if events:
            for e in events:
                counts[type(e).__name__] += 1
            delay = last[0] + pace - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            last[0] = time.monotonic()
            publisher.publish(translator.batch(events, run.state.requests, time.time()))
            counts["batches"] += 1
        return result

    workload = Workload(params)
    status = _Status(console, requests)
    console.print(
        f"publishing {name}'s KV events through vLLM {source}'s ZmqEventPublisher on "
        f"{publisher._endpoint}" + (f" (replay {publisher._replay_endpoint})" if replay else ""),
        highlight=False,
    )
    time.sleep(wait)
    problem: str | None = None
    try:
        workload.run(Twins(apply, twins), lambda stats: status.show(workload.started, counts))
    except (Nonconformance, RuntimeError) as exc:
        problem = str(exc)
    finally:
        status.done()
        _drain(publisher)
        _summary(console, name, source, counts, translator, loaded, run.record.steps)
        if hold:
            console.print(f"replay socket up for {hold:g} s more", highlight=False)
            time.sleep(hold)
        publisher.shutdown()
    if problem is not None:
        console.print(f"[bold red]{name} diverged from the spec:[/bold red] ", end="")
        console.print(problem, markup=False, highlight=False)
        sys.exit(EXIT_FINDING)
    sys.exit(EXIT_PASS)


def _drain(publisher: Any, seconds: float = 5.0) -> None:
    """Wait until the publisher's thread has sent every queued batch (so that the summary
    means: all out, and in the replay buffer)."""
    queue = getattr(publisher, "_event_queue", None)
    deadline = time.monotonic() + seconds
    while queue is not None and not queue.empty() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the last one: taken off the queue, being sent


def endpoints(endpoint: str, bind: str, replay: str | None) -> tuple[str, str | None, str | None]:
    """The PUB endpoint, the replay endpoint and the interface to bind them on, as the
    options say: a wildcard ``--endpoint`` (or ``--bind tcp://HOST:PORT``) binds on the
    ``--bind`` interface; ``--endpoint tcp://HOST:PORT`` connects (the release's own
    publisher decides, given no interface), its replay socket still bound on the ``--bind``
    interface. An address off loopback is bound only when ``--bind`` names its host or
    ``*``; :class:`PublisherError` otherwise."""
    host, bound = bind_host(bind)
    for address, what in ((bound, "--bind"), (replay, "--replay-endpoint")):
        named = _host_of(address)
        if named not in (None, host) and host != ALL_INTERFACES and not _loopback(named):
            raise PublisherError(
                f"{what} {address} binds on {named}, off loopback: give --bind {named} (or "
                "--bind '*') to bind beyond loopback"
            )
    if bound is not None:
        return bound, replay, host
    if endpoint.startswith("tcp://*:"):
        return endpoint, replay, host
    if "::" in endpoint or "*" in endpoint:  # vLLM's publisher binds these: never implied
        raise PublisherError(
            f"--endpoint {endpoint}: vLLM's publisher would bind it, not connect; to bind, "
            "give --bind tcp://HOST:PORT (an IPv4 address connects)"
        )
    return endpoint, None if replay is None else on_interface(replay, host), None


def _host_of(address: str | None) -> str | None:
    """The host of ``tcp://HOST:PORT`` (``None`` for a wildcard or no address)."""
    if address is None or not address.startswith("tcp://") or address.startswith("tcp://*:"):
        return None
    return address.removeprefix("tcp://").rpartition(":")[0] or None


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


class _Status:
    """One status line, rewritten in place on a terminal, every few steps otherwise."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.total = total
        self.shown = 0.0

    def show(self, started: int, counts: Counter[str]) -> None:
        now = time.monotonic()
        if now - self.shown < 0.2:
            return
        self.shown = now
        line = (
            f"requests {min(started, self.total)}/{self.total}  batches {counts['batches']}  "
            f"stored {counts['BlockStored']}  removed {counts['BlockRemoved']}"
        )
        if self.console.is_terminal:
            self.console.file.write("\r" + line + "\033[K")
            self.console.file.flush()

    def done(self) -> None:
        if self.console.is_terminal:
            self.console.file.write("\r\033[K")


def _summary(
    console: Console,
    name: str,
    release: str,
    counts: Counter[str],
    translator: EventTranslator,
    loaded: Any,
    steps: int,
) -> None:
    table = Table(title=f"kvpool publish — {name} through vLLM {release}'s publisher")
    for column in ("batches", "BlockStored", "BlockRemoved", "AllBlocksCleared", "steps"):
        table.add_column(column, justify="right")
    table.add_row(
        str(counts["batches"]),
        str(counts["BlockStored"]),
        str(counts["BlockRemoved"]),
        str(counts["AllBlocksCleared"]),
        str(steps),
    )
    console.print(table)
    touched = sorted(set(loaded.placeholders.after_load))
    console.print(
        "vLLM placeholders the publisher touched while running: "
        + (", ".join(touched) if touched else "none"),
        highlight=False,
    )
    if translator.tokens_unknown:
        console.print(f"{translator.tokens_unknown} stored block(s) published without tokens")
