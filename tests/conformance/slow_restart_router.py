"""A router on the wire that, as vllm-router does, takes a sequence number that goes back
for a restarted publisher and forgets that rank's blocks, but only after a pause (a router
that rebuilds its state before it applies the new publisher's first batch). Until then its
watermark is the old publisher's: a suite that takes that for the new one asks too early."""

import time
from collections import Counter

from kvpool.conformance import api

#: How long it takes to forget a restarted publisher's blocks.
PAUSE = 0.5


class SlowRestartRouter:
    name = "slow-restart-router"
    protocol = 2
    feeds = "wire"

    def start(self, wire: api.Wire) -> None:
        self.copies = [Counter[tuple[int, bytes]]() for _ in range(wire.ranks)]
        self.seen: dict[int, int] = {}
        self.feed = api.WireFeed(wire, self.take)

    def take(self, events: list[object], rank: int, sequence: int) -> None:
        if sequence < self.seen.get(rank, -1):
            time.sleep(PAUSE)  # a restarted publisher: its old blocks are forgotten, slowly
            self.copies[rank].clear()
        for event in events:
            if isinstance(event, api.BlockStored):
                self.copies[rank].update((event.group_id, h) for h in event.block_hashes)
            elif isinstance(event, api.BlockRemoved):
                self.copies[rank][(event.group_id, event.block_hash)] -= 1
            elif isinstance(event, api.AllBlocksCleared):
                self.copies[rank].clear()
        self.seen[rank] = sequence

    def applied(self) -> dict[int, int]:
        return dict(self.seen)

    def credited(self, prompt: api.Prompt) -> dict[int, int]:
        keys = [(prompt.group_id, api.wire_hash(h)) for h in prompt.block_hashes]
        return {r: next((i for i, k in enumerate(keys) if c[k] < 1), len(keys))
                for r, c in enumerate(self.copies)}  # fmt: skip

    def close(self) -> None:
        self.feed.close()
