"""What a manager target declares about itself that changes how the request-level
properties judge it, read off its hooks in one place (:func:`declared_by`).

Each is a by-design difference of some engine's manager from vLLM's (the engine's adapter
says which and why, where it declares it); the property checker (:mod:`.checks`) reads
only this record, never an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """A manager target's declared differences (the defaults: vLLM's manager)."""

    #: It keys a block when it schedules it, before the engine writes it: a write needs the
    #: block held once, its key does not forbid the write.
    registers_when_scheduled: bool = False
    #: It may replace a full table entry (one the request's tokens fill) with the cached
    #: block of the same prefix (freeing its computed duplicate, or when it schedules the
    #: block): ``append-only`` then lets exactly that change pass; what the request then
    #: reads and writes there is still judged (``own-contents``, ``write-guard``).
    swaps_in_cached: bool = False
    #: For a manager that keys a request's decoded tokens only when it finishes: how many
    #: leading tokens of a request it has keyed; ``hit-keys`` holds the table to its key up
    #: to there (the hit and every prefill it cached).
    keyed_tokens: Callable[[str], int] | None = None
    #: It refuses ``reset_prefix_cache`` while any request is live, running or preempted:
    #: ``idle-pool-free`` then asks a reset to succeed only once no request is left at all.
    resets_only_without_requests: bool = False


def declared_by(target: object) -> Capabilities:
    """The capabilities ``target`` declares by its hooks (:mod:`..hooks` checked their
    kinds when it was loaded)."""
    return Capabilities(
        registers_when_scheduled=bool(getattr(target, "registers_when_scheduled", False)),
        swaps_in_cached=bool(getattr(target, "swaps_in_cached", False)),
        keyed_tokens=getattr(target, "keyed_tokens", None),
        resets_only_without_requests=bool(getattr(target, "resets_only_without_requests", False)),
    )
