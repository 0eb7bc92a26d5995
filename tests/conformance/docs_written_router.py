"""A protocol 2 router written from the extension API page alone: fed in process, copies
counted per rank, group and hash; a prompt credited up to its first block with no copy."""

from collections import Counter
from collections.abc import Sequence

from kvpool.conformance import api


class CopiesRouter:
    name = "copies-router"
    protocol = 2
    feeds = "process"
    ranks = "per-rank"

    def start(self, wire: api.Wire) -> None:
        self.copies = [Counter[tuple[int, bytes]]() for _ in range(wire.ranks)]

    def apply(self, events: Sequence[object], rank: int) -> None:
        held = self.copies[rank]
        for event in events:
            if isinstance(event, api.BlockStored):
                held.update((event.group_id, h) for h in event.block_hashes)
            elif isinstance(event, api.BlockRemoved):
                held[(event.group_id, event.block_hash)] -= 1
            elif isinstance(event, api.AllBlocksCleared):
                held.clear()

    def credited(self, prompt: api.Prompt) -> dict[int, int]:
        answer = {}
        for rank, held in enumerate(self.copies):
            n, hashes = 0, prompt.block_hashes
            while n < len(hashes) and held[(prompt.group_id, hashes[n])] > 0:
                n += 1
            answer[rank] = n
        return answer


def make_router() -> CopiesRouter:
    return CopiesRouter()
