"""``kvpool show``: a trace file rendered as it was recorded."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from ..usage import fail_usage


@click.command(name="show")
@click.argument("trace_file", type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "markdown"]),
    default="table",
    show_default=True,
    help="markdown: a table to paste into an upstream issue.",
)
def show_trace(trace_file: str, fmt: str) -> None:
    """Render TRACE_FILE as it was recorded: one row per step (action, free queue, ref
    counts, keys, expected and actual), the diverging step marked."""
    from . import show
    from .files import TraceFileError, read_trace

    console = Console()
    from ..machines.engine.trace_file import SUFFIX as ENGINE_SUFFIX

    if trace_file.endswith(ENGINE_SUFFIX):  # the engine machine's: its actions, as recorded
        from ..machines.engine.command import show_engine_file

        show_engine_file(console, Path(trace_file))
        return
    try:
        trace = read_trace(Path(trace_file))
    except TraceFileError as exc:
        fail_usage(console, str(exc))
    if fmt == "markdown":
        click.echo(show.markdown(trace), nl=False)
        return
    for line in show.header_lines(trace):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(show.table(trace))
    verdict = show.divergence(trace)
    if verdict is not None:
        console.print(verdict, style="red", highlight=False, markup=False, soft_wrap=True)
