"""A router's index written from the contract page's "Writing a consumer" section alone,
as a router author would: copies counted per group and hash, a prefix held up to its
first block with no copy left."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class CountingRouter:
    name = "counting-router"

    def __init__(self) -> None:
        self.copies: dict[tuple[int, bytes], int] = {}

    def apply(self, events: Sequence[Any]) -> tuple[()]:
        for event in events:
            kind = type(event).__name__
            if kind == "BlockStored":
                for h in event.block_hashes:
                    key = (event.group_id, h)
                    self.copies[key] = self.copies.get(key, 0) + 1
            elif kind == "BlockRemoved":
                key = (event.group_id, event.block_hash)
                if self.copies.get(key, 0) > 1:
                    self.copies[key] -= 1
                else:
                    self.copies.pop(key, None)
            elif kind == "AllBlocksCleared":
                self.copies.clear()
        return ()

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        held = 0
        for h in block_hashes:
            if (group_id, h) not in self.copies:
                break
            held += 1
        return held

    def residency(self) -> dict[tuple[int, bytes], int]:
        return dict(self.copies)


def make_router() -> CountingRouter:
    return CountingRouter()
