"""The consumer protocol: a router's view of one worker's cache, fed that worker's stream.

A consumer is anything that rebuilds, from one worker's KV events, what that worker holds:
the spec's models, a KV-aware router's index, a plugin someone else writes. The suite
feeds it every event the worker publishes, in order, and asks it about prefixes; it never
looks inside. A plugin implements the three methods below and is named on the command
line as ``--consumer mypkg.router:make_consumer`` (a factory taking no argument).

Events are the spec's (:mod:`kvpool.spec.events`): ``BlockStored`` (hashes of full or
partial blocks, in request order, after ``parent_block_hash``; one group), ``BlockRemoved``
(one hash of one group) and ``AllBlocksCleared``. Hashes are bytes without the group
suffix, as pools publish them; groups are small ints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from kvpool.spec.consumer import EventViolation
from kvpool.spec.events import Event


class ConsumerError(ValueError):
    """A consumer could not be built or fed (its package missing, its process dead, an
    answer it cannot give): a usage or loading problem, never a finding."""


@runtime_checkable
class Consumer(Protocol):
    """A router's view of one worker's cache.

    ``name`` says which consumer it is in findings (``"dynamo"``, ``"my-router"``).
    """

    name: str

    def apply(self, events: Sequence[Event]) -> tuple[EventViolation, ...]:
        """Take the worker's next events, in the order published.

        Returns the violations of the stream properties the consumer itself can tell
        (``events-parent-known``, ``events-removed-known``); a router that drops what it
        cannot place silently returns ``()``.
        """
        ...

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        """How many leading blocks of the prefix ``block_hashes`` (root first, in group
        ``group_id``) the consumer believes the worker holds: what it would route by.

        post: 0 <= __return__ <= len(block_hashes)
        """
        ...

    def residency(self) -> Mapping[tuple[int, bytes], int] | None:
        """What it holds, ``{(group, hash): copies}`` (copies 1 where it keeps presence
        only); ``None`` when it cannot say. For messages: the judge asks ``held_blocks``."""
        ...
