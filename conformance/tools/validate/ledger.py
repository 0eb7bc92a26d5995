"""What a consumer rebuilds from one stream, block by block, keyed by content.

Two streams of the same requests name their blocks by different hashes (an engine hashes
tokens its own way), so a stored block is known here by its *prefix*: the tokens from the
first block of its request to its own last token, learnt from the event's parent (whose
prefix comes first) and its token ids. Per prefix the ledger counts stores and removals
(one per physical copy, as vLLM publishes them) and the copies held now (what a counting
consumer holds; the prefixes with a copy are what a set consumer rebuilds). An event that
cannot be placed (a parent never stored, token ids that do not cover its blocks, a removal
of a hash never stored or of more copies than were stored) is a problem of the stream.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

Prefix = tuple[int, ...]


class Ledger:
    """One stream's stores, removals and copies, per prefix; the problems met."""

    def __init__(self) -> None:
        #: (group, hash) -> the prefix it was stored as.
        self.prefix_of: dict[tuple[int, bytes], Prefix] = {}
        self.stores: Counter[Prefix] = Counter()
        self.removals: Counter[Prefix] = Counter()
        self.copies: Counter[Prefix] = Counter()
        self.problems: list[str] = []

    def stored(
        self,
        group: int,
        hashes: Sequence[bytes],
        parent: bytes | None,
        chunks: Sequence[Sequence[int]] | None,
    ) -> None:
        """A ``BlockStored``: ``hashes`` after ``parent``, block ``i`` holding
        ``chunks[i]`` (``None``: the event's token ids do not cover its blocks)."""
        if chunks is None or len(chunks) != len(hashes):
            self.problems.append(
                f"a BlockStored of {len(hashes)} blocks whose token ids do not cover them"
            )
            return
        before: Prefix = ()
        if parent is not None:
            found = self.prefix_of.get((group, parent))
            if found is None:
                self.problems.append(
                    f"a BlockStored after parent {parent.hex()[:16]}, a hash never stored"
                )
                return
            before = found
        for block_hash, chunk in zip(hashes, chunks, strict=True):
            before = before + tuple(chunk)
            self.prefix_of[(group, block_hash)] = before
            self.stores[before] += 1
            self.copies[before] += 1

    def removed(self, group: int, block_hash: bytes) -> None:
        prefix = self.prefix_of.get((group, block_hash))
        if prefix is None:
            self.problems.append(f"a BlockRemoved of {block_hash.hex()[:16]}, a hash never stored")
            return
        self.removals[prefix] += 1
        if self.copies[prefix] <= 0:
            self.problems.append(f"a BlockRemoved of a {blocks_of(prefix)} with no copy left")
            return
        self.copies[prefix] -= 1

    def cleared(self) -> None:
        self.copies.clear()

    def present(self) -> frozenset[Prefix]:
        """The prefixes with a copy: what a set consumer holds."""
        return frozenset(p for p, n in self.copies.items() if n > 0)


def blocks_of(prefix: Prefix, block_size: int | None = None) -> str:
    """A prefix in words: its length and its last tokens."""
    tail = ", ".join(map(str, prefix[-4:]))
    size = f"{len(prefix) // block_size}-block " if block_size else ""
    return f"{size}prefix of {len(prefix)} tokens ending [..., {tail}]"
