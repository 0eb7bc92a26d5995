"""``kvpool vectors``: generate the test vectors from the spec, or check a target
against them."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ...targets.description import TargetDescription
from ...targets.loading import TargetLoadError
from ...targets.options import TARGET
from ...usage import EXIT_FINDING, EXIT_PASS, fail_usage


@click.group()
def vectors() -> None:
    """Test vectors: the conformance contract as data (ITF JSON files, any language).

    \b
      kvpool vectors generate --out vectors      write the corpus (byte-identical each run)
      kvpool vectors check vectors --target T    replay it against a target
    """


@vectors.command(name="generate")
@click.option(
    "--out",
    default="vectors",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for the corpus: PROFILE/OPERATION/LEVEL-N.itf.json and "
    "PROFILE/invariants/NAME.itf.json. A file an earlier generation wrote there (listed in "
    "its .kvpool-vectors manifest) and no longer in the corpus is removed; nothing else is.",
)
def vectors_generate(out: str) -> None:
    """Generate the corpus from the spec: every profile, level and operation, and the
    edge of every invariant. Only files kvpool wrote are ever removed or replaced: a file
    of yours where a vector goes is an error (exit 2), before anything is written."""
    from .generate import write_corpus
    from .owned import FolderNotOwned

    try:
        written = write_corpus(Path(out))
    except (FolderNotOwned, OSError) as exc:
        fail_usage(Console(), str(exc))
    click.echo(f"{len(written.files)} vectors in {out}")
    if written.removed:
        click.echo(f"removed {len(written.removed)} vector(s) no longer in the corpus")
    if written.left:
        click.echo(
            f"left {len(written.left)} other *.itf.json file(s) in place (not written by "
            f"kvpool), e.g. {written.left[0]}"
        )


@vectors.command(name="check")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@click.option(
    "--target", "-t", default="impl", show_default=True, type=TARGET, help="The pool to check."
)
@click.option(
    "--profile", "-p", default=None, help="Only the vectors of this profile (default: all)."
)
def vectors_check(directory: str, target: TargetDescription, profile: str | None) -> None:
    """Replay every vector in DIRECTORY against TARGET: a table of passed, failed and
    skipped (an operation the target lacks) per group; exit 1 if any failed."""
    from ...trace.files import TraceFileError
    from .check import check_vectors

    console = Console()
    try:
        results = check_vectors(Path(directory), target, profile)
    except (TraceFileError, TargetLoadError, KeyError) as exc:
        fail_usage(console, exc.args[0] if isinstance(exc, KeyError) else str(exc))
    if not results:
        fail_usage(console, f"no vectors in {directory}" + (f" for {profile}" if profile else ""))
    table = Table(title=f"kvpool vectors check — target {target.text}")
    for column in ("group", "passed", "failed", "skipped"):
        table.add_column(column, justify="left" if column == "group" else "right")
    for group, result in sorted(results.items()):
        failed = f"[red]{len(result.failed)}[/red]" if result.failed else "0"
        table.add_row(group, str(result.passed), failed, str(result.skipped))
    console.print(table)
    failures = [(g, name, why) for g, r in sorted(results.items()) for name, why in r.failed]
    for group, name, why in failures:
        console.print(f"FAIL {group}/{name}: {why}", markup=False, highlight=False, soft_wrap=True)
    total = sum(r.passed for r in results.values())
    console.print(f"{total} passed, {len(failures)} failed", highlight=False)
    sys.exit(EXIT_FINDING if failures else EXIT_PASS)
