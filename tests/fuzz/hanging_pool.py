"""A pool that stops answering: ``get_usage`` never returns, as a deadlocked pool would."""

from __future__ import annotations

import time

from kvpool.impl import BlockPool


class HangingPool(BlockPool):
    def get_usage(self) -> float:
        time.sleep(3600)
        return super().get_usage()
