"""Probing a pool's prefix-cache index through its own lookups.

Not every pool lets the adapter read its index: a user's pool may keep it under another
name or in a layout :func:`~.hash_index.read_index` does not know. Its lookups still show
it. After every step the adapter asks the pool's ``get_cached_block`` about every key the
run has handed it or seen on its blocks (bounded: the pools are small and the runs short),
one group at a time, and the view carries each key with the block the lookup returned.
The spec's lookup is a pure query (its ``get_cached_block`` returns the state unchanged),
so probing changes nothing a conforming pool shows.

A pool whose index is readable is probed too, for the keys that left its index: a lookup
answering from an entry the index no longer holds (a cache of past answers) shows only
there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..machines.pool.target import Lookups

#: key -> the block the pool's lookup returns for it (``None``: a miss).
Lookup = Callable[[bytes], int | None]

#: The most keys a probe remembers; the oldest are forgotten first.
MAX_KEYS = 512


class IndexProbe:
    """The keys a run has shown a pool, and what the pool's lookups answer for them."""

    def __init__(self, limit: int = MAX_KEYS) -> None:
        self.limit = limit
        # a dict keeps the order keys were first seen, so the oldest go first
        self._keys: dict[bytes, None] = {}

    def remember(self, keys: Iterable[bytes]) -> None:
        """Add ``keys`` to the keys probed from now on."""
        for key in keys:
            if key not in self._keys:
                self._keys[key] = None
        while len(self._keys) > self.limit:
            del self._keys[next(iter(self._keys))]

    @property
    def keys(self) -> frozenset[bytes]:
        return frozenset(self._keys)

    def probe(self, lookup: Lookup, skip: Iterable[bytes] = ()) -> Lookups:
        """Every remembered key but those in ``skip``, with the block ``lookup`` returns for
        it, keys in byte order."""
        left_out = frozenset(skip)
        return tuple((key, lookup(key)) for key in sorted(self._keys) if key not in left_out)
