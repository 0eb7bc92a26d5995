"""The prefixes a stream has named: what the judge asks a consumer about.

Every ``BlockStored`` says, for each hash, which hash comes before it (the first after the
event's parent, each next after the one before). Those links, per group, give every
stored hash the prefix that leads to it, root first: the request a router would be asked
to route. A prefix is asked about only when it is *placeable*: every link on it is known
and was always the same (a pool-level draw may store one hash after two different
parents; no lookup path is then the prefix, and no router can be judged on it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from kvpool.spec.events import BlockStored, Event

#: The longest prefix asked about (blocks), and how many prefixes are asked per step: the
#: most recently stored ends first.
MAX_PREFIX = 64
MAX_PREFIXES = 48

#: Marks a hash stored after two different parents.
AMBIGUOUS = b"\x00ambiguous"


class PrefixBook:
    """Parent links per group, learnt from the stream; :meth:`prefixes` to ask about."""

    def __init__(self) -> None:
        #: (group, hash) -> the hash before it (``None``: a root; AMBIGUOUS: two seen).
        self.parent: dict[tuple[int, bytes], bytes | None] = {}
        #: (group, hash) of prefix ends, most recently stored last.
        self.ends: OrderedDict[tuple[int, bytes], None] = OrderedDict()
        #: (group, hash) named before another hash: never an end again (its prefix is
        #: asked about as the start of the longer one).
        self.inner: set[tuple[int, bytes]] = set()

    def note(self, events: Iterable[Event]) -> None:
        for event in events:
            if not isinstance(event, BlockStored):
                continue
            before = event.parent_block_hash
            group = event.group_id
            for h in event.block_hashes:
                where = (group, h)
                if where in self.parent and self.parent[where] != before:
                    self.parent[where] = AMBIGUOUS
                else:
                    self.parent[where] = before
                if before is not None:
                    self.inner.add((group, before))
                    self.ends.pop((group, before), None)  # no longer an end
                self.ends.pop(where, None)
                if where not in self.inner:
                    self.ends[where] = None
                before = h

    def prefix(self, group: int, block_hash: bytes) -> tuple[bytes, ...] | None:
        """The prefix ending at ``block_hash``, root first; ``None`` when not placeable
        (a link unknown or ambiguous, a cycle, longer than :data:`MAX_PREFIX`)."""
        chain: list[bytes] = []
        h: bytes | None = block_hash
        while h is not None:
            if len(chain) >= MAX_PREFIX or h in chain or (group, h) not in self.parent:
                return None
            chain.append(h)
            h = self.parent[(group, h)]
            if h == AMBIGUOUS:
                return None
        return tuple(reversed(chain))

    def prefixes(self) -> tuple[list[tuple[int, tuple[bytes, ...]]], int]:
        """The placeable prefixes to ask about, ``(group, hashes)``, the most recent
        first, and how many ends were not placeable."""
        asked: list[tuple[int, tuple[bytes, ...]]] = []
        unplaceable = 0
        for group, h in reversed(self.ends):
            if len(asked) >= MAX_PREFIXES:
                break
            chain = self.prefix(group, h)
            if chain is None:
                unplaceable += 1
            else:
                asked.append((group, chain))
        return asked, unplaceable
