"""What ``kvpool diff`` prints: the header (the two pools, level, seed, actions drawn and left
out), the table of differences, and each difference as its short action sequence with
A's and B's outcome side by side."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from ...machines.pool.levels import Level
from ...machines.pool.signature import signature
from ...report import config_line
from ...trace.model import Trace
from ...trace.show import action_text, outcome_text
from .common import COMPARED, label
from .loading import Pair
from .run import DiffResult

#: What each level compares, between two pools.
MEANING = {
    "order": "the exact free queue: both pools hand out the very same blocks",
    "safety": "set semantics: interchangeable free blocks may differ by id, the free "
    "queue is compared as a set",
}


def _line(console: Console, text: str) -> None:
    """One line as it is: no markup, no highlighting, never wrapped."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _side(letter: str, spec: str, version: str | None, profile: str) -> str:
    shown = f" ({version})" if version and version not in spec else ""
    return f"{letter} {spec}{shown}, profile {profile}"


def print_header(console: Console, pair: Pair, level: Level, seed: int) -> None:
    """Which pools, how strictly, and what is drawn, left out and compared."""
    a, b, common = pair.a, pair.b, pair.common
    _line(console, "kvpool diff: " + _side("A", a.spec, a.version, a.profile.name))
    _line(console, "        against " + _side("B", b.spec, b.version, b.profile.name))
    _line(console, f"  level {level.name} ({MEANING[level.name]}), seed {seed}")
    drawn = common.drawn()
    _line(console, f"  actions drawn ({len(drawn)}): {', '.join(drawn)}")
    if common.one_sided:
        one = "; ".join(f"{label(op)} ({taker} only: {why})" for op, taker, why in common.one_sided)
        _line(console, f"  taken by one side only, a difference when taken: {one}")
    if common.left_out:
        left = "; ".join(f"{op} ({why})" for op, why in common.left_out)
        _line(console, f"  left out ({len(common.left_out)}): {left}")
    else:
        _line(console, "  left out: none (both pools offer the same actions)")
    compared = ["results", "free count", *(o for o in COMPARED if o in common.observes)]
    _line(console, f"  compared: {', '.join(compared)}")
    if common.not_compared:
        skipped = "; ".join(f"{o} ({why})" for o, why in common.not_compared)
        _line(console, f"  not compared: {skipped}")


def print_summary(console: Console, result: DiffResult) -> None:
    """How much was run, and how many test cases parted (safety)."""
    record = result.record
    _line(
        console,
        f"  {record.examples} test cases, {record.steps} actions in {result.seconds:.1f}s",
    )
    if result.parted:
        _line(
            console,
            f"  {result.parted} test cases stopped where the pools reused different free "
            "blocks (a cached one against an unkeyed one, say): allowed at safety, and "
            "compared at --level order",
        )


def differences_table(result: DiffResult, paths: list[Path | None]) -> Table:
    """One row per difference: its kind, the length of its shrunk trace, its file."""
    table = Table(title=f"{len(result.differences)} difference(s) between A and B")
    for column in ("#", "kind", "actions", "trace"):
        right = column in ("#", "actions")
        table.add_column(column, justify="right" if right else "left", overflow="fold")
    for number, (difference, path) in enumerate(zip(result.differences, paths, strict=True), 1):
        table.add_row(
            str(number),
            signature(difference.message),
            str(len(difference.trace)),
            str(path) if path is not None else "-",
        )
    return table


def print_difference(
    console: Console, number: int, recorded: Trace | None, message: str, config: object
) -> None:
    """One difference: what differs, the pool it was found on, and its actions with A's
    and B's outcomes side by side (from the recorded trace)."""
    console.print(f"\n[bold red]difference {number}[/bold red]", highlight=False)
    _line(console, f"  {message}")
    _line(console, f"  on {config_line(config)}")
    if recorded is None or not recorded.steps:
        return
    meta = recorded.meta
    table = Table(show_lines=False, box=None, pad_edge=False)
    table.add_column("#", justify="right")
    table.add_column("action")
    table.add_column(f"A {meta.target}")
    table.add_column(f"B {meta.versus}")
    diverging = recorded.diverging_step
    for i, step in enumerate(recorded.steps, 1):
        table.add_row(
            str(i),
            action_text(step.action),
            outcome_text(step.expected),
            outcome_text(step.actual),
            style="red" if i == diverging else None,
        )
    console.print(table)
