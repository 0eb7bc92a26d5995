"""``reference/invariants.md``: every invariant of the pool, its statement and its predicate,
shown as the code that checks it."""

from __future__ import annotations

import inspect

from kvpool.spec.invariants import INVARIANTS

from .markdown import GENERATED, code, fence, paragraphs, prose


def _statement(doc: str) -> tuple[str, str]:
    """The docstring's first line without its number in the contract, and that number."""
    first = " ".join(inspect.cleandoc(doc).split())
    number, dot, rest = first.partition(". ")
    if dot and number.isdigit():
        return rest, number
    return first, ""


def invariants_page() -> str:
    """The page, in the order of :data:`INVARIANTS`."""
    out = [
        GENERATED,
        "# Invariants\n",
        "Every invariant holds after every action, in every reachable state. Each is a "
        "named predicate over the pool's state; `broken_invariants(state)` names the ones "
        "that do not hold, so a failure says which rule broke. `kvpool prove` proves the "
        "numbered ones for any number of blocks (see [proofs](proofs.md)).\n",
    ]
    for name, predicate in INVARIANTS.items():
        statement, number = _statement(predicate.__doc__ or name)
        out.append(f"## {name}\n")
        out.append(paragraphs(prose(statement)))
        where = f"`{predicate.__module__}.{predicate.__name__}`"
        numbered = (
            f" (invariant {number} of [the contract](../guide/semantics.md#the-invariants))"
            if number
            else ""
        )
        out.append(f"The predicate {where}{numbered}:\n")
        out.append(fence(inspect.getsource(predicate), "python"))
    out.append(
        "## Listing them\n\n" + f"`kvpool rules` prints every id with its statement; in code, "
        f"{code('kvpool.spec.INVARIANTS')} maps each id to its predicate.\n"
    )
    return "\n".join(out)
