"""``kvpool validate``: an engine's request log and KV-event recording against the spec."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click
from kvpool.spec import get_profile
from rich.console import Console

from ...usage import EXIT_FINDING, EXIT_PASS, fail_usage
from ..stream.recording import RecordingError
from .request_log import LogError, read_log, request_json
from .shrink import Driver, Shrunk, shrink
from .spec_side import ReplayError
from .verdict import Verdict, validate


@click.command("validate")
@click.argument("log_path", metavar="REQUEST_LOG", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("recording", metavar="RECORDING", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--profile",
    "-p",
    required=True,
    help="The profile the engine is judged by (vllm-0.33, seed, ...).",
)
@click.option(
    "--rerun",
    metavar="'CMD ARGS...'",
    help="Shrink by running the engine again, a process per attempt: CMD ARGS... REQUESTS "
    "LOG RECORDING (see the validation page).",
)
@click.option("--rerun-timeout", default=120.0, show_default=True, help="Seconds per attempt.")
@click.option("--budget", default=120.0, show_default=True, help="Seconds to spend shrinking.")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the shrunk request sequence (a request log; default: "
    "kvpool-traces/validate-ENGINE.jsonl).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON on stdout.")
def validate_command(
    log_path: Path,
    recording: Path,
    profile: str,
    rerun: str | None,
    rerun_timeout: float,
    budget: float,
    trace_path: Path | None,
    as_json: bool,
) -> None:
    """Validate an engine's KV-event stream against the spec.

    REQUEST_LOG is the engine's request log (JSON lines: prompts in order, salts, what came
    back) and RECORDING its KV-event stream as `kvpool monitor --save` records it. The
    spec's manager replays the requests under --profile; after every request, the stores
    and removals per copy, their parents, and the prefixes a consumer rebuilds are
    compared. Exit 0: no difference; 1: a difference, shrunk and written as a trace;
    2: the files cannot be read or do not fit the profile.
    """
    console = Console(stderr=as_json)
    try:
        chosen = get_profile(profile)
    except KeyError:
        fail_usage(console, f"unknown profile {profile!r}")
    try:
        log = read_log(log_path)
        verdict = validate(log, recording, chosen)
    except (LogError, RecordingError, ReplayError) as exc:
        fail_usage(console, str(exc))
    if verdict.difference is None:
        _report(console, log.engine, verdict, None, None, as_json)
        sys.exit(EXIT_PASS)
    driver = None
    if rerun:
        words = shlex.split(rerun)
        if not words:
            fail_usage(console, "--rerun needs a command")
        driver = Driver(words, chosen, rerun_timeout)
    shrunk = shrink(log, verdict.difference, driver, budget)
    path = trace_path or Path("kvpool-traces") / f"validate-{_slug(log.engine)}.jsonl"
    _write_trace(path, shrunk, profile)
    _report(console, log.engine, verdict, shrunk, path, as_json)
    sys.exit(EXIT_FINDING)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")[:60] or "engine"


def _write_trace(path: Path, shrunk: Shrunk, profile: str) -> None:
    log = shrunk.log
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "format": "kvpool-request-log",
        "version": 1,
        "engine": log.engine,
        "block_size": log.block_size,
        "num_gpu_blocks": log.num_gpu_blocks,
        "profile": profile,
        "difference": shrunk.difference.text(),
    }
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for request in log.requests:
            out.write(json.dumps(request_json(request)) + "\n")


def _report(
    console: Console,
    engine: str,
    verdict: Verdict,
    shrunk: Shrunk | None,
    path: Path | None,
    as_json: bool,
) -> None:
    counts = (
        f"stores {verdict.engine_stores} (spec {verdict.spec_stores}), removals "
        f"{verdict.engine_removals} (spec {verdict.spec_removals})"
    )
    if as_json:
        record = {
            "engine": engine,
            "requests": verdict.requests,
            "per_request": verdict.per_request,
            "spec_stores": verdict.spec_stores,
            "engine_stores": verdict.engine_stores,
            "spec_removals": verdict.spec_removals,
            "engine_removals": verdict.engine_removals,
            "difference": None if verdict.difference is None else verdict.difference.text(),
        }
        if shrunk is not None:
            record.update(
                shrunk=[r.request_id for r in shrunk.log.requests],
                shrunk_difference=shrunk.difference.text(),
                rerun=shrunk.rerun,
                attempts=shrunk.attempts,
                trace=str(path),
            )
        click.echo(json.dumps(record, indent=2))
        return
    when = (
        "after every request"
        if verdict.per_request
        else "once, after the last request (no 'sent' times)"
    )
    console.print(
        f"kvpool validate: {engine}, {verdict.requests} requests judged {when}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"  the engine's stream up to there: {counts}", highlight=False, soft_wrap=True)
    if verdict.difference is None:
        console.print("[green]no difference[/green]: the stream is the spec's, copy by copy")
        return
    assert shrunk is not None
    console.print(
        f"difference: {verdict.difference.text()}", markup=False, highlight=False, soft_wrap=True
    )
    how = (
        f"re-running the engine ({shrunk.attempts} attempts)"
        if shrunk.rerun
        else "cutting the log after the difference" + (f" ({shrunk.note})" if shrunk.note else "")
    )
    console.print(
        f"shrunk to {len(shrunk.log.requests)} request(s) by {how}: "
        + ", ".join(r.request_id for r in shrunk.log.requests),
        highlight=False,
        soft_wrap=True,
    )
    if shrunk.difference != verdict.difference:
        console.print(
            f"shrunk: {shrunk.difference.text()}", markup=False, highlight=False, soft_wrap=True
        )
    console.print(f"trace: {path}", highlight=False, soft_wrap=True)
