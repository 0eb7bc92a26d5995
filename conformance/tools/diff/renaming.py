"""Which block of pool B is which block of pool A.

At ``order`` both pools must hand out the very same ids, so the renaming is the identity
and never changes. At ``safety`` (set semantics) a pool may hand out any free block, so two
pools that hand out different but *interchangeable* blocks are still in step, under a
renaming of A's ids onto B's. Interchangeable means nothing about the two blocks tells them
apart: both free, no key, no reuse watcher. The renaming starts as the identity (both pools
number their blocks the same way) and changes only by swapping two such blocks.

When the two pools reuse free blocks that are *not* interchangeable (one sacrifices a
cached block, the other an unkeyed one) both choices are allowed at ``safety``, but from
then on the pools hold different caches; :meth:`Renaming.match` reports that as a parting
of the ways, not as a difference.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpool.spec import NULL_BLOCK, PoolState


def plain(state: PoolState, block: int) -> bool:
    """Whether ``block`` is free and carries nothing that tells it from another such block:
    no key, no extra keys, no reuse watcher (read off the spec's copy of pool A)."""
    return (
        state.in_range(block)
        and block != NULL_BLOCK
        and block in state.free
        and state.primary[block] is None
        and not state.extra[block]
        and block not in state.watchers
    )


@dataclass(frozen=True)
class Parting:
    """Both pools reused a free block, each a legal choice, but not interchangeable ones;
    ``message`` says which and what they held."""

    message: str


class Renaming:
    """A one-to-one map between A's block ids and B's, for one pool of ``num_blocks``."""

    def __init__(self, num_blocks: int, fixed: bool) -> None:
        self._to_b = list(range(num_blocks))
        self._to_a = list(range(num_blocks))
        #: ``order``: the identity for good (a different id is a difference).
        self.fixed = fixed

    @property
    def identity(self) -> bool:
        return all(a == b for a, b in enumerate(self._to_b))

    def to_b(self, block: int) -> int:
        """B's id for A's ``block`` (ids out of range are left as they are)."""
        return self._to_b[block] if 0 <= block < len(self._to_b) else block

    def to_a(self, block: int) -> int:
        """A's id for B's ``block`` (ids out of range are left as they are)."""
        return self._to_a[block] if 0 <= block < len(self._to_a) else block

    def _swap(self, x: int, y: int) -> None:
        """Swap the B counterparts of A's blocks ``x`` and ``y``."""
        bx, by = self._to_b[x], self._to_b[y]
        self._to_b[x], self._to_b[y] = by, bx
        self._to_a[bx], self._to_a[by] = y, x

    def match(
        self, before: PoolState, got_a: tuple[int, ...], got_b: tuple[int, ...]
    ) -> Parting | None:
        """Rename so that the blocks B handed out correspond, one by one, to A's.

        ``before`` is the spec's copy of pool A before the allocation. A pair of blocks
        that cannot be renamed onto each other is left alone (the comparison of results
        then reports it), unless both were free in their pools: that is a
        :class:`Parting`.
        """
        if self.fixed or len(got_a) != len(got_b):
            return None
        assigned: set[int] = set()
        for x, y in zip(got_a, got_b, strict=True):
            if not (0 <= x < len(self._to_b) and 0 <= y < len(self._to_a)):
                return None
            d = self._to_a[y]  # the block of A that B's choice stands for
            if x in assigned or d in assigned:
                return None
            assigned.add(x)
            if d == x:
                continue
            if plain(before, x) and plain(before, d):
                self._swap(x, d)
            elif x in before.free and d in before.free:
                return Parting(_parting_message(before, x, y, d))
            else:
                return None
        return None


def _parting_message(before: PoolState, x: int, y: int, d: int) -> str:
    def what(block: int) -> str:
        keys = before.keys_of(block)
        if keys:
            return f"a cached block (key {keys[0].hex()[:8]})"
        if block in before.watchers:
            return f"an unpinned block (watcher {before.watchers[block]})"
        return "an unkeyed block"

    return (
        f"A reused free block {x}, {what(x)}, where B reused its block {y}, {what(d)}: "
        "a different eviction choice, which safety allows"
    )
