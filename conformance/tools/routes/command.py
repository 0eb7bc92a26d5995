"""``kvpool route-check``: how accurately routers know a live worker's cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.table import Table

from ...consumers.naming import BUILT_IN, parse_consumer
from ...consumers.protocol import ConsumerError
from ...engines.vllm.isolation import IsolationError as ReleaseIsolationError
from ...engines.vllm.releases import ReleaseError
from ...run_options import file_option, seed_option
from ...targets.loading import TargetLoadError, load_target
from ...usage import EXIT_FINDING, EXIT_PASS, EXIT_USAGE, comma_names
from ..stream.publisher import DEFAULT_RELEASE, PublisherError, load_publisher, publisher_source
from ..validate.dynamo_mocker import MockerError
from .isolation import IsolationError, inside, run_isolated
from .mocker_stream import MOCKER_CONSUMERS, NOT_ON_MOCKER, is_mocker, mocker_problem
from .recording import RecordingError, contract_table, read_recording, sample, to_json
from .scenarios import (
    DP_RANKS,
    INDEXER,
    SCENARIOS,
    Routers,
    ScenarioResult,
    Setting,
    binds_one_interface,
    run_scenario,
)
from .sglang_stream import SGLANG_CONSUMERS, is_sglang, prefetch_sglang

CONSUMERS = (*BUILT_IN, INDEXER)


@click.command("route-check")
@click.option(
    "--consumer",
    "consumers",
    default=INDEXER,
    show_default=True,
    help="Comma-separated consumers measured on the same stream: dynamo-indexer (Dynamo's "
    "standalone indexer as a process, reading vLLM's wire itself), vllm-router (vllm-router "
    "as a process with fake workers, reading the wire and its replay socket), dynamo (its "
    "RadixTree in process, events translated), count, set (the spec's models), or a plugin "
    "module:factory (consumer protocol 2, or 1).",
)
@click.option("--target", "-t", default="vllm==0.33.0", show_default=True,
              help="The pool whose events are published: 'impl', 'vllm==X.Y.Z', ...")  # fmt: skip
@click.option(
    "--scenario",
    "scenarios",
    default=",".join(SCENARIOS),
    show_default=True,
    help="Comma-separated scenarios: "
    + "; ".join(f"{name}: {text}" for name, text in SCENARIOS.items())
    + ".",
)
@click.option("--requests", "-r", default=40, show_default=True, type=click.IntRange(2, 400),
              help="Requests per scenario (a scenario in two halves runs half each).")  # fmt: skip
@click.option("--publisher", "release", default=None,
              help="The vLLM release whose ZmqEventPublisher publishes the stream: by default "
              f"the target's own release (vllm==X.Y.Z), else {DEFAULT_RELEASE}.")  # fmt: skip
@click.option("--every", default=4, show_default=True, type=click.IntRange(1),
              help="Ask the consumers every N batches (and at each end).")  # fmt: skip
@seed_option(0, "The workload's seed.")
@file_option("--record", help="Write the run as data (JSON) to FILE: what `--table` renders.")
@click.option(
    "--table",
    "tables",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="Run nothing: print the contract page's scenario x consumer table (Markdown) from "
    "these recordings.",
)
def route_check(
    consumers: str,
    target: str,
    scenarios: str,
    requests: int,
    release: str | None,
    every: int,
    seed: int,
    record: Path | None,
    tables: tuple[Path, ...],
) -> None:
    """Measure how well routers know a live worker's cache.

    For each scenario the serving workload of `kvpool workload` drives TARGET through the
    spec's manager; after every request action its events go out as one batch through
    the release's own ZmqEventPublisher, on loopback. An SGLang target
    (sglang==0.4.6.post5) is its own scheduler, sent each prompt the workload admits and
    publishing through SGLang's own publisher, its truth SGLang's tree, and only
    dynamo-indexer is asked.
    The dynamo-mocker target is Dynamo's mocker, started on loopback: each prompt the
    workload admits is sent to its request endpoint, its own stream is read, its truth is
    the spec's replay of the prompts it ran, and only dynamo-indexer is asked (no resets
    or data-parallel scenario).
    Each consumer follows the stream: Dynamo's indexer process subscribes to it (and is
    asked over HTTP), the in-process consumers are fed the same events in the same order.
    After every --every batches each is asked, for the most recent prompt prefixes, how
    many leading blocks the worker holds; the truth is what a lookup on the spec's pool
    hits.

    The table gives, per scenario and consumer, recall (the share of held prefix blocks it
    knew of) and precision (the share of its claims the worker held), summed over every
    check, and the curve: each consumer's recall and precision at a few checks spread over
    the run. The indexer serves HTTP on every interface, and vLLM releases before 0.30 and
    SGLang bind their publisher on every interface (tcp://*:PORT), so a run with any of
    them happens inside a private network namespace whose only interface is loopback
    (unshare --net).

    \b
      kvpool route-check --consumer dynamo-indexer --target vllm==0.33.0
      kvpool route-check --consumer count,set,dynamo,dynamo-indexer --record run.json
      kvpool route-check --table run.json

    Exit 0 when every consumer knew exactly what the worker held in every scenario, 1 when
    one lost or over-claimed blocks, 2 on a usage error (unknown consumer, no namespace)
    or a mocker that died mid-run (its exit status and its log's last lines).
    """
    out = Console(highlight=False)
    if not out.is_terminal:  # a log or a pipe: room for every column
        out.width = max(out.width, 110)
    err = Console(stderr=True, highlight=False, soft_wrap=True)

    def usage(message: str) -> NoReturn:
        err.print("[red]error:[/red] ", end="")
        err.print(message, markup=False)
        sys.exit(EXIT_USAGE)

    if tables:
        try:
            click.echo(contract_table([read_recording(p) for p in tables]))
        except RecordingError as exc:
            usage(str(exc))
        sys.exit(EXIT_PASS)
    try:
        names = [c.strip() for c in consumers.split(",") if c.strip()]
        for name in names:
            if name != INDEXER:
                parse_consumer(name)
        chosen = comma_names(scenarios, SCENARIOS, "scenario")
    except (ConsumerError, click.BadParameter) as exc:
        usage(str(exc))
    if not names:
        usage("--consumer names no consumer")
    mocker = is_mocker(target)
    if mocker:
        chosen = _mocker_scenarios(chosen, scenarios != ",".join(SCENARIOS), usage)
        if names != [INDEXER]:
            usage(
                f"--consumer: on the mocker's stream only {INDEXER} is asked ({MOCKER_CONSUMERS})"
            )
        if release not in (None, target):
            usage(f"--publisher: {target}'s stream is published by the mocker itself")
        problem = mocker_problem()
        if problem is not None:
            usage(problem)
    try:
        sglang = not mocker and is_sglang(target)
        chosen_release = target if sglang or mocker else release or publisher_source(target)
    except TargetLoadError as exc:
        usage(str(exc))
    if sglang and release not in (None, target):
        usage(f"--publisher: {target}'s stream is published by its own release's publisher")
    if sglang and names != [INDEXER]:
        usage(f"--consumer: on SGLang's stream only {INDEXER} is asked ({SGLANG_CONSUMERS})")
    if sglang and "data-parallel" in chosen:
        if scenarios != ",".join(SCENARIOS):
            usage("--scenario data-parallel: SGLang's batches carry no data-parallel rank")
        chosen = [c for c in chosen if c != "data-parallel"]  # the default list, without it
    release = chosen_release
    if not inside():
        # the namespace has no network: the release's files are fetched (cached) out here
        try:
            if mocker:
                wildcard_only = True  # it binds its ZMQ sockets on every interface
            elif sglang:
                prefetch_sglang(target, Setting(target, release, ()).block_size)
                wildcard_only = True  # its publisher binds tcp://* only
            else:
                load_target(target)
                wildcard_only = not binds_one_interface(load_publisher(release))
        except (TargetLoadError, ReleaseError, ReleaseIsolationError, PublisherError) as exc:
            usage(str(exc))
    if not inside() and (INDEXER in names or wildcard_only):
        argv = ["route-check", "--consumer", consumers, "--target", target, "--scenario",
                scenarios, "--requests", str(requests), "--publisher", release, "--every",
                str(every), "--seed", str(seed)]  # fmt: skip
        if record is not None:
            argv += ["--record", str(record.resolve())]
        try:
            sys.exit(run_isolated(argv))
        except IsolationError as exc:
            usage(str(exc))
    setting = Setting(target, release, tuple(names), requests=requests, every=every, seed=seed)
    results: list[ScenarioResult] = []
    # the consumers are started once for every scenario of the run
    routers = Routers(setting, DP_RANKS if "data-parallel" in chosen else 1)
    try:
        for name in chosen:
            err.print(f"scenario {name}: {SCENARIOS[name]} ...")
            try:
                results.append(run_scenario(name, setting, routers))
            except (TargetLoadError, ReleaseError, ReleaseIsolationError, PublisherError) as exc:
                usage(str(exc))
            except (ConsumerError, MockerError) as exc:
                usage(f"scenario {name}: {exc}")
    finally:
        routers.close()
    _print(out, results, setting)
    if record is not None:
        words = [f"--consumer {consumers}", f"--target {target}"]
        if list(chosen) != list(SCENARIOS):
            words.append(f"--scenario {','.join(chosen)}")
        words += [f"--requests {requests}", f"--publisher {release}", f"--seed {seed}"]
        command = "kvpool route-check " + " ".join(words)
        document = to_json(results, setting, command, _commit(), _dynamo_version())
        record.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        err.print(f"recorded to {record}")
    perfect = all(t.found == t.held == t.claimed for r in results for t in r.tallies.values())
    sys.exit(EXIT_PASS if perfect else EXIT_FINDING)


def _mocker_scenarios(
    chosen: list[str], named: bool, usage: Callable[[str], NoReturn]
) -> list[str]:
    """The scenarios the mocker runs: those it cannot (:data:`NOT_ON_MOCKER`) are left out
    of the default list, and a usage error when named."""
    refused = [name for name in chosen if name in NOT_ON_MOCKER]
    if refused and named:
        usage("--scenario " + "; ".join(f"{n}: {NOT_ON_MOCKER[n]}" for n in refused))
    return [name for name in chosen if name not in NOT_ON_MOCKER]


def _print(console: Console, results: list[ScenarioResult], setting: Setting) -> None:
    source = (
        "its own publisher"
        if setting.release == setting.target
        else f"vLLM {setting.release}'s publisher"
    )
    table = Table(
        title=f"kvpool route-check — {setting.target} through {source}, "
        f"{setting.requests} requests per scenario"
    )
    for column in ("scenario", "consumer", "checks", "held", "recall", "precision",
                   "lowest recall"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("scenario", "consumer") else "right")
    for r in results:
        for name, t in r.tallies.items():
            table.add_row(
                r.name,
                name,
                str(t.checks),
                str(t.held),
                f"{t.recall:.1%}",
                f"{t.precision:.1%}",
                "—" if t.lowest_recall is None else f"{t.lowest_recall:.1%}",
            )
    console.print(table)
    console.print(
        "recall: the share of held prefix blocks the consumer knew of; precision: the share "
        "of the blocks it claimed that the worker held; summed over every check of every "
        "prompt prefix; lowest recall: the worst single check."
    )
    curve = Table(
        title="over the run: recall / precision at checks spread over it (after N batches)"
    )
    curve.add_column("scenario")
    curve.add_column("consumer")
    curve.add_column("recall / precision @ batch")
    for r in results:
        for name, t in r.tallies.items():
            points = " · ".join(
                f"{p.recall:.0%} / {p.precision:.0%} @ {p.batch}" for p in sample(t.over_time, 5)
            )
            curve.add_row(r.name, name, points or "—")
    console.print(curve)
    if any(r.ranks for r in results):
        ranks = Table(title="per data-parallel rank")
        for column in ("scenario", "consumer", "rank", "checks", "held", "recall", "precision"):
            ranks.add_column(
                column, justify="left" if column in ("scenario", "consumer") else "right"
            )
        for r in results:
            for name, per_rank in r.ranks.items():
                for rank, t in enumerate(per_rank):
                    ranks.add_row(r.name, name, str(rank), str(t.checks), str(t.held),
                                  f"{t.recall:.1%}", f"{t.precision:.1%}")  # fmt: skip
        console.print(ranks)
    streams = Table(
        title="what was published, and what Dynamo's indexer counted (its /metrics; batch/*: "
        "batches its log says it could not decode, or gaps it saw)"
    )
    for column in ("scenario", "published", "indexer counted (type/status)"):
        streams.add_column(column)
    for r in results:
        published = ", ".join(f"{k} {n}" for k, n in sorted(r.published.items()))
        counted = ", ".join(f"{k} {n}" for k, n in sorted(r.indexer.items())) or "—"
        streams.add_row(r.name, published, counted)
    console.print(streams)


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("KVPOOL_COMMIT", "unknown")


def _dynamo_version() -> str:
    try:
        return metadata.version("ai-dynamo-runtime")
    except metadata.PackageNotFoundError:
        return "not installed"
