"""Routers with one planted fault each, on the docs-written router: each must be caught
at the events level as the router property it breaks (:data:`BREAKS`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from docs_written_consumer import CountingRouter  # pytest puts this folder on sys.path


class ForgetsCopies(CountingRouter):
    """Logical presence: the first removal of a hash drops it, whatever copies remain."""

    def apply(self, events: Sequence[Any]) -> tuple[()]:
        for event in events:
            if type(event).__name__ == "BlockRemoved":
                self.copies.pop((event.group_id, event.block_hash), None)
            else:
                super().apply([event])
        return ()


class RefusesEmptyStores(CountingRouter):
    """Refuses a batch with a ``BlockStored`` naming no hash, and forgets every block it
    held (a refused batch taken for a hole in the stream)."""

    def apply(self, events: Sequence[Any]) -> tuple[()]:
        if any(type(e).__name__ == "BlockStored" and not e.block_hashes for e in events):
            self.copies.clear()
            return ()
        return super().apply(events)


class ForgetsCopiesRefusesEmptyStores(RefusesEmptyStores):
    """Both faults at once: each must be reported under its own property in one run."""

    def apply(self, events: Sequence[Any]) -> tuple[()]:
        if any(type(e).__name__ == "BlockStored" and not e.block_hashes for e in events):
            return super().apply(events)
        for event in events:
            if type(event).__name__ == "BlockRemoved":
                self.copies.pop((event.group_id, event.block_hash), None)
            else:
                super().apply([event])
        return ()


class IgnoresClears(CountingRouter):
    """Keeps everything through an ``AllBlocksCleared``."""

    def apply(self, events: Sequence[Any]) -> tuple[()]:
        return super().apply([e for e in events if type(e).__name__ != "AllBlocksCleared"])


class IgnoresRemovals(CountingRouter):
    """Never forgets a block."""

    def apply(self, events: Sequence[Any]) -> tuple[()]:
        return super().apply([e for e in events if type(e).__name__ != "BlockRemoved"])


class MergesGroups(CountingRouter):
    """One index for every group: a hash held in group 1 is claimed for group 0."""

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        held = 0
        for h in block_hashes:
            if not any(key[1] == h for key in self.copies):
                break
            held += 1
        return held


class OneBlockShort(CountingRouter):
    """Never counts the last block of a prefix of two or more."""

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        held = super().held_blocks(block_hashes, group_id)
        return held - 1 if held == len(block_hashes) and held >= 2 else held


#: fault -> the property its finding must name.
BREAKS: dict[str, str] = {
    "ForgetsCopies": "router-copies",
    "IgnoresClears": "router-precision",
    "IgnoresRemovals": "router-precision",
    "MergesGroups": "router-precision",
    "OneBlockShort": "router-recall",
    "RefusesEmptyStores": "router-recall",
}
#: A router with two faults -> the properties one run must report, one finding each.
BOTH = ("ForgetsCopiesRefusesEmptyStores", ("router-copies", "router-recall"))


def not_a_consumer() -> object:
    """A factory whose product has no ``held_blocks``: refused before any run."""
    return type("Half", (), {"name": "half", "apply": print})()
