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
    "ForgetsCopies": "router-recall",
    "IgnoresClears": "router-precision",
    "IgnoresRemovals": "router-precision",
    "MergesGroups": "router-precision",
    "OneBlockShort": "router-recall",
}


def not_a_consumer() -> object:
    """A factory whose product has no ``held_blocks``: refused before any run."""
    return type("Half", (), {"name": "half", "apply": print})()
