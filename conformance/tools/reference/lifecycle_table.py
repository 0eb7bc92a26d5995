"""The lifecycle tables in Markdown: the six states, and the transitions the spec makes."""

from __future__ import annotations

from collections.abc import Callable

from .lifecycle import STATES, Transition, explore, grouped
from .markdown import code, table


def states_table() -> str:
    """The six states: what tells each apart and what a caller may do with it."""
    rows = [(s.title, s.ref_cnt, s.key, s.in_queue, s.writable, s.hittable) for s in STATES]
    return table(("state", "ref_cnt", "key", "in free queue", "writable", "hittable"), rows)


def transitions_table(
    link: Callable[[str], str], transitions: tuple[Transition, ...] | None = None
) -> str:
    """Every change of state the spec makes, with the operations that make it; ``link``
    turns a path under ``docs/`` into a link from the page the table goes on."""
    if transitions is None:
        transitions = explore()[1]
    titles = {s.id: s.title for s in STATES}
    rows = [
        (
            titles[source],
            titles[target],
            ", ".join(f"[{code(op)}]({link(f'reference/actions/{op}.md')})" for op in operations),
        )
        for (source, target), operations in grouped(transitions).items()
    ]
    return table(("from", "to", "operations"), rows)
