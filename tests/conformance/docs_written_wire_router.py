"""A protocol 2 router on the wire (api.WireFeed), copies per rank, group and hash."""

from collections import Counter

from kvpool.conformance import api


class WireCopiesRouter:
    name = "wire-copies-router"
    protocol = 2
    feeds = "wire"

    def start(self, wire: api.Wire) -> None:
        self.copies = [Counter[tuple[int, bytes]]() for _ in range(wire.ranks)]
        self.seen: dict[int, int] = {}
        self.feed = api.WireFeed(wire, self.take)

    def take(self, events: list[object], rank: int, sequence: int) -> None:
        for event in events:
            if isinstance(event, api.BlockStored):
                self.copies[rank].update((event.group_id, h) for h in event.block_hashes)
            elif isinstance(event, api.BlockRemoved):
                self.copies[rank][(event.group_id, event.block_hash)] -= 1
            elif isinstance(event, api.AllBlocksCleared):
                self.copies[rank].clear()
        self.seen[rank] = sequence  # the watermark: the last batch applied

    def applied(self) -> dict[int, int]:
        return dict(self.seen)

    def credited(self, prompt: api.Prompt) -> dict[int, int]:
        keys = [(prompt.group_id, api.wire_hash(h)) for h in prompt.block_hashes]
        return {r: next((i for i, k in enumerate(keys) if c[k] < 1), len(keys))
                for r, c in enumerate(self.copies)}  # fmt: skip

    def close(self) -> None:
        self.feed.close()
