"""The judgement after every request: the engine's stream against the spec's.

After each request the two ledgers (:mod:`.ledger`) are compared, in this order:

``stream``
    the engine's stream has a problem of its own (a parent never stored, a removal of a
    copy it never stored, a message that does not decode, a gap);
``presence``
    the prefixes with a copy differ: a set consumer (a router's radix tree) rebuilds a
    different cache from the engine's stream than from the spec's;
``per-copy``
    the same prefixes are present, but the stores or removals per prefix differ: a
    counting consumer (vLLM's own contract: one event per physical copy) is misled;
``hits``
    the engine answered a prefix hit (``cached_tokens``) other than the spec's.

The first difference found ends the judgement; its kind is what shrinking keeps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .ledger import Ledger, Prefix, blocks_of

#: Kinds of difference, in the order they are looked for.
KINDS = ("stream", "presence", "per-copy", "hits")
#: How many prefixes a difference names.
SHOWN = 3


@dataclass(frozen=True)
class Difference:
    """The first request after which the streams differ, and how."""

    kind: str
    request: int
    request_id: str
    detail: str

    def text(self) -> str:
        return f"{self.kind}: after request {self.request + 1} ({self.request_id!r}): {self.detail}"


def compare(
    spec: Ledger,
    engine: Ledger,
    block_size: int,
    hits: tuple[int, int | None],
) -> tuple[str, str] | None:
    """The first kind of difference between the ledgers now, with its detail."""
    if engine.problems:
        return "stream", "; ".join(engine.problems[:SHOWN])
    if spec.problems:  # the spec's own stream is placed by the spec's tokens: a kvpool bug
        raise AssertionError(f"the spec's stream cannot be placed: {spec.problems[0]}")
    held, shown = spec.present(), engine.present()
    if held != shown:
        parts = [f"{blocks_of(p, block_size)} held by the spec only" for p in sorted(held - shown)]
        parts += [
            f"{blocks_of(p, block_size)} held by the engine only" for p in sorted(shown - held)
        ]
        return "presence", "; ".join(parts[:SHOWN]) + _more(parts)
    for what, ours, theirs in (
        ("stores", spec.stores, engine.stores),
        ("removals", spec.removals, engine.removals),
    ):
        if ours != theirs:
            parts = _counts(what, ours, theirs, block_size)
            return "per-copy", "; ".join(parts[:SHOWN]) + _more(parts) + (
                f" (in all: {sum(ours.values())} {what} in the spec's stream, "
                f"{sum(theirs.values())} in the engine's)"
            )
    return hit_difference(*hits)


def hit_difference(expected: int, answered: int | None) -> tuple[str, str] | None:
    """The ``hits`` difference, when the engine answered a hit other than the spec's."""
    if answered is not None and answered != expected:
        return "hits", f"the engine answered {answered} cached tokens, the spec {expected}"
    return None


def _counts(
    what: str, ours: Counter[Prefix], theirs: Counter[Prefix], block_size: int
) -> list[str]:
    return [
        f"{blocks_of(p, block_size)}: {ours[p]} {what} in the spec's stream, "
        f"{theirs[p]} in the engine's"
        for p in sorted(set(ours) | set(theirs), key=lambda p: (len(p), p))
        if ours[p] != theirs[p]
    ]


def _more(parts: list[str]) -> str:
    return f" (and {len(parts) - SHOWN} more)" if len(parts) > SHOWN else ""
