"""``kvpool targets``' table of the actions each target takes.

On a terminal wide enough it is a matrix, an action a row and a target a column (``yes``
where the target takes it). A terminal too narrow for every target's column gets the same
facts turned round, a target a row with the actions it does not take, so that no target's
name, version or profile is ever cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table

#: Wider than any such table: measured in it, a table shows its natural width.
NATURAL_WIDTH = 1000
TITLE = "actions each target takes (profile: the default --profile)"


@dataclass(frozen=True)
class Described:
    """A target as the table shows it: its name, version, default profile, and the
    operations it takes (or why it is unavailable)."""

    name: str
    version: str
    profile: str
    operations: frozenset[str] | str


@dataclass(frozen=True)
class ActionsTable:
    """The table of ``targets`` x ``rows`` (label, operation), laid out to fit."""

    targets: tuple[Described, ...]
    rows: tuple[tuple[str, str], ...]

    def matrix(self) -> Table:
        table = Table(title=TITLE)
        table.add_column("action", no_wrap=True)
        for target in self.targets:
            table.add_column(f"{target.name}\n{target.version}\n{target.profile}", justify="center")
        for label, operation in self.rows:
            marks = [
                ("yes" if operation in t.operations else "-")
                if isinstance(t.operations, frozenset)
                else "?"
                for t in self.targets
            ]
            table.add_row(label, *marks)
        return table

    def by_target(self) -> Table:
        table = Table(title=TITLE)
        table.add_column("target", no_wrap=True)
        table.add_column("version", no_wrap=True)
        table.add_column("profile", no_wrap=True)
        table.add_column("actions it does not take", min_width=len(max(self._labels(), key=len)))
        for target in self.targets:
            table.add_row(target.name, target.version, target.profile, self._missing(target))
        return table

    def _labels(self) -> list[str]:
        return [label for label, _ in self.rows]

    def _missing(self, target: Described) -> str:
        if not isinstance(target.operations, frozenset):
            return "? (unavailable: see below)"
        missing = [label for label, op in self.rows if op not in target.operations]
        return ", ".join(missing) if missing else "none: it takes every action"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        matrix = self.matrix()
        unbounded = options.update_width(NATURAL_WIDTH)  # a measure is clamped to its width
        if Measurement.get(console, unbounded, matrix).maximum <= options.max_width:
            yield matrix
        else:
            yield self.by_target()
