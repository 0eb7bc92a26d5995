"""What an action gives back to its caller, as the spec expects it."""

from __future__ import annotations

from dataclasses import dataclass

from .events import Event

#: The direct result of an action: returned block ids (``get_new_blocks``, a cache hit),
#: ``None`` (a miss, or an operation that returns nothing), a flag, a count, the usage, a key
#: (``cache_partial_block``) or the events taken.
Result = None | bool | int | float | bytes | tuple[int, ...] | tuple[Event, ...]

#: A reuse watcher that fired: the block handed out or reset, and the watcher's name.
Firing = tuple[int, str]


@dataclass(frozen=True)
class Observation:
    """The result of one action and the reuse watchers it fired, in firing order."""

    result: Result = None
    fired: tuple[Firing, ...] = ()
