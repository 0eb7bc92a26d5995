"""``kvpool profile``: profiles as files (``kvpool profile derive``, ``kvpool profile show``)."""

from __future__ import annotations

from pathlib import Path

import click
from kvpool.spec import SEED, get_profile
from kvpool.spec.profile import knob_names
from rich.console import Console
from rich.table import Table

from ..usage import fail_usage
from .derive import profile_document
from .explain import shown


@click.group()
def profile() -> None:
    """Profiles as files: measure one on a pool, or show what one says.

    A profile file (TOML) names a base profile and the knobs that differ, each with a
    one-line reason; --profile FILE.toml runs any command against it.
    """


@profile.command()
@click.option(
    "--target",
    "-t",
    required=True,
    help="The pool to measure: any --target of kvpool conform (impl, vllm==X.Y.Z, "
    "vllm@PATH, module:factory, ...).",
)
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the file here (default: print it).",
)
def derive(target: str, out: Path | None) -> None:
    """Measure every knob on TARGET with short probes and write the profile it states.

    Each probe builds a fresh pool and applies a few actions whose outcome tells the
    knob's value (where a freed block goes, how a coarse block is keyed, whether a call is
    taken). The file is based on seed and lists the knobs that differ, each with what the
    pool did; a knob a probe could not decide is marked '# undecided' and keeps the seed's
    value. Check the pool against it with: kvpool conform --target TARGET --profile FILE.

    \b
    Example:
      kvpool profile derive --target vllm==0.27.1 --out vllm-0.27.1.toml

    Exit status: 0 written, 2 the target could not be loaded.
    """
    from ..targets.loading import TargetLoadError
    from .explain import target_measurements

    console = Console(stderr=True)
    try:
        _, _, measured = target_measurements(target)
    except (TargetLoadError, KeyError) as exc:
        fail_usage(console, str(exc.args[0] if isinstance(exc, KeyError) else exc))
    text = profile_document(target, measured)
    if out is None:
        click.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    undecided = sum(1 for m in measured if m.value is None)
    console.print(
        f"wrote {out}: {text.count('[knobs.')} knobs differ from seed, {undecided} undecided",
        markup=False,
        highlight=False,
    )


@profile.command()
@click.argument("name")
def show(name: str) -> None:
    """Show every knob of profile NAME (a built-in name or a FILE.toml) beside the seed's."""
    console = Console()
    if not console.is_terminal:  # a log or a pipe: room for the reasons
        console.width = max(console.width, 160)
    try:
        chosen = get_profile(name)
    except KeyError as exc:
        fail_usage(console, str(exc.args[0]))
    console.print(f"{chosen.name}: {chosen.description}", markup=False, highlight=False)
    reasons = dict(chosen.reasons)
    table = Table(
        title=f"profile {chosen.name}" + (f" (base {chosen.base})" if chosen.base else "")
    )
    table.add_column("knob", no_wrap=True)
    table.add_column("value")
    table.add_column("seed")
    table.add_column("why (set by this profile)")
    for knob in knob_names():
        value, seed = getattr(chosen, knob), getattr(SEED, knob)
        same = "same" if value == seed else shown(seed)
        table.add_row(knob, shown(value), same, reasons.get(knob, ""))
    console.print(table)
