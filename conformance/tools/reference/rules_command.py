"""``kvpool rules``: every rule, invariant and property the suite checks, by its id."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import click
from rich.console import Console
from rich.table import Table


@click.command()
def rules() -> None:
    """Explain every rule, invariant and property the suite checks, by the id it reports."""
    from kvpool.spec import EVENT_PROPERTIES, INVARIANTS, RULES
    from kvpool.spec.consumer import MODEL_DESCRIPTIONS
    from kvpool.spec.manager import PROPERTIES

    console = Console()
    sections = [
        ("caller's contract (refused with ContractViolation, rule id)", RULES),
        ("pool invariants (hold after every action)", _first_lines(INVARIANTS)),
        ("request-level properties (checked after every request action)", PROPERTIES),
        ("KV event properties (checked at the events level after every step)", EVENT_PROPERTIES),
        ("consumer models (kvpool conform --level events --consumer MODEL)", MODEL_DESCRIPTIONS),
    ]
    for title, entries in sections:
        table = Table(title=title, show_lines=False)
        table.add_column("id", no_wrap=True)
        table.add_column("meaning")
        for name, text in entries.items():
            table.add_row(name, text)
        console.print(table)


def _first_lines(predicates: Mapping[str, Callable[..., bool]]) -> dict[str, str]:
    """Each predicate's docstring summary, without its number in the contract."""
    texts = {}
    for name, predicate in predicates.items():
        summary = (predicate.__doc__ or name).strip().splitlines()[0]
        number, _, rest = summary.partition(". ")
        texts[name] = rest if number.isdigit() else summary
    return texts
