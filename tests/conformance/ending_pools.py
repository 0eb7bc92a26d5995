"""Pools that end badly, each a one-method variant of kvpool's own ``BlockPool``: one whose
free count crashes, one that calls ``sys.exit(0)``, one that raises ``KeyboardInterrupt``,
and one that refuses an out-of-contract call by crashing on a name it never defined."""

from __future__ import annotations

import sys
from typing import Any

from kvpool.impl import BlockPool


class FreeCountCrashes(BlockPool):
    """``get_num_free_blocks`` raises ``AttributeError`` (the pool's own bug)."""

    def get_num_free_blocks(self) -> int:
        raise AttributeError("'FreeCountCrashes' object has no attribute 'free_count'")


class ExitsOnAllocation(BlockPool):
    """``get_new_blocks`` of two or more blocks calls ``sys.exit(0)``."""

    def get_new_blocks(self, num_blocks: int) -> Any:
        if num_blocks >= 2:
            sys.exit(0)
        return super().get_new_blocks(num_blocks)


class InterruptsOnAllocation(BlockPool):
    """``get_new_blocks`` of two or more blocks raises ``KeyboardInterrupt``."""

    def get_new_blocks(self, num_blocks: int) -> Any:
        if num_blocks >= 2:
            raise KeyboardInterrupt
        return super().get_new_blocks(num_blocks)


class HalfAnEntry:
    """An engine entry with a name and a summary, and none of EngineEntry's methods."""

    name = "broken"
    summary = "an entry point registered without subclassing EngineEntry"


NOT_AN_ENTRY = HalfAnEntry()
