"""``kvpool replay``: a trace file replayed against its target (or another)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from ..machines.pool.surface import SurfaceMismatch
from ..targets.description import TargetDescription
from ..targets.loading import TargetLoadError
from ..targets.options import MANAGER, TARGET, text_of
from ..usage import EXIT_FINDING, EXIT_PASS, fail_usage


@click.command()
@click.argument("trace_file", type=click.Path(dir_okay=False))
@click.option(
    "--target", "-t", default=None, type=TARGET, help="Replay against this target instead."
)
@click.option("--manager", default=None, type=MANAGER, help="Replay against this manager instead.")
@click.option(
    "--versus", default=None, type=TARGET, help="A diff trace: replay against this pool B instead."
)
@click.option(
    "--profile",
    default=None,
    help="Judge by this profile (a built-in name, or your own profile file NAME.toml): "
    "needed for a trace recorded with a profile file, which a trace names but never reads.",
)
@click.option(
    "--consumer",
    default=None,
    help="An events trace judged by a consumer plugin (module:factory): load it (a trace "
    "names a plugin but never loads it).",
)
def replay(
    trace_file: str,
    target: TargetDescription | None,
    manager: TargetDescription | str | None,
    versus: TargetDescription | None,
    consumer: str | None,
    profile: str | None,
) -> None:
    """Replay TRACE_FILE against its target (or --target): exit 0 if the target now
    conforms, 1 with the first diverging step if it still fails (or gives two verdicts for
    one trace: nondeterministic), 2 if the file or target cannot be used.

    A trace file is data: it may name the built-in impl or spec, anything else (a vLLM
    release or tree, module:factory, a manager, a diff's pool B) is loaded only when you
    name it with --target, --manager or --versus; the error says which. An engine trace
    (``*.engine.itf.json``, from ``--machine engine``) replays on the engine --target names."""
    from . import show
    from .files import TraceFileError, read_trace
    from .replay import replay_trace
    from .trust import NamedInFile

    console = Console()
    from ..machines.engine.trace_file import SUFFIX as ENGINE_SUFFIX

    if trace_file.endswith(ENGINE_SUFFIX):  # the engine machine's: its engine replays it
        from ..machines.engine.command import replay_engine_file

        replay_engine_file(console, Path(trace_file), text_of(target))
        return
    try:
        if consumer is not None:
            from ..consumers.naming import parse_consumer

            parse_consumer(consumer)
        trace = read_trace(Path(trace_file))
        verdict = replay_trace(
            trace, text_of(target), text_of(manager), versus=text_of(versus), profile=profile
        )
    except NamedInFile as exc:
        fail_usage(console, f"{exc}; run: {exc.command(trace_file)}")
    except (TraceFileError, TargetLoadError, SurfaceMismatch, KeyError, ValueError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
        fail_usage(console, message)
    meta = trace.meta
    console.print(
        f"kvpool replay: {trace_file} on {text_of(target) or meta.target} "
        f"({meta.machine}/{meta.level}, profile {meta.profile}), {len(trace.actions)} actions",
        highlight=False,
        markup=False,
    )
    if verdict.conforms:
        console.print(verdict.describe(), style="green", highlight=False, markup=False)
        sys.exit(EXIT_PASS)
    for i, action in enumerate(verdict.trace.actions, 1):
        marker = "  <- diverges here" if i == verdict.step else ""
        console.print(
            f"  {i:>3}. {show.action_text(action)}{marker}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(verdict.describe(), style="red", highlight=False, markup=False, soft_wrap=True)
    sys.exit(EXIT_FINDING)
