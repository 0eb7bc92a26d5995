"""The free queue: every free block in eviction order, as a doubly linked list.

The list is circular around one sentinel block (``root``), as in CPython's
pure-Python ``OrderedDict``: ``root.next_free_block`` is the front (next to be
handed out), ``root.prev_free_block`` the back, and an empty queue is the root
linked to itself. Because every member has a real neighbour on both sides, no
operation needs an "is it the head / is it the tail" branch.

Invariants kept by every method:

* L1 (membership) a block is in the queue iff both its links are set; a block
  outside the queue has both links ``None``;
* L2 (symmetry) for every member ``b``: ``b.next.prev is b`` and
  ``b.prev.next is b`` (the root included);
* L3 (count) ``num_free_blocks`` equals the number of members.

Every method is O(1) per block and allocates nothing but the list it returns.

"""

from __future__ import annotations

from collections.abc import Sequence

from .block import KVCacheBlock
from .errors import BlockPoolError

_SENTINEL_ID = -1


class FreeKVCacheBlockQueue:
    """Doubly linked free list with a sentinel root; starts as ``blocks`` in order."""

    __slots__ = ("_root", "num_free_blocks")

    def __init__(self, blocks: Sequence[KVCacheBlock]) -> None:
        root = KVCacheBlock(_SENTINEL_ID)
        # Empty ring: the root is its own neighbour on both sides (L1, L2).
        root.prev_free_block = root
        root.next_free_block = root
        self._root = root
        self.num_free_blocks = 0
        self.append_n(blocks)

    # ---------------------------------------------------------------- take out

    def popleft(self) -> KVCacheBlock:
        """Take the front block out. Pre: the queue is not empty."""
        if self.num_free_blocks == 0:
            raise BlockPoolError("popleft", "queue-empty", "the free queue is empty")
        root = self._root
        blk = root.next_free_block
        assert blk is not None and blk.next_free_block is not None  # L1: members are linked
        nxt = blk.next_free_block
        # Close the ring over the gap (L2), then mark the block as outside (L1).
        root.next_free_block = nxt
        nxt.prev_free_block = root
        blk.prev_free_block = blk.next_free_block = None
        self.num_free_blocks -= 1  # L3
        return blk

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Take the first ``n`` blocks out, front first. Pre: ``0 <= n <= num_free_blocks``."""
        if not 0 <= n <= self.num_free_blocks:
            raise BlockPoolError(
                "popleft_n",
                "queue-count",
                f"cannot take {n} blocks from a queue of {self.num_free_blocks}",
            )
        root = self._root
        out: list[KVCacheBlock] = []
        blk = root.next_free_block
        for _ in range(n):
            assert blk is not None  # L1: the walk stays on members
            nxt = blk.next_free_block
            # Detached blocks get both links None (L1); the ring is closed below.
            blk.prev_free_block = blk.next_free_block = None
            out.append(blk)
            blk = nxt
        assert blk is not None
        # Splice the root to the first block left (or to itself when emptied): L2.
        root.next_free_block = blk
        blk.prev_free_block = root
        self.num_free_blocks -= n  # L3
        return out

    def remove(self, block: KVCacheBlock) -> None:
        """Take ``block`` out from wherever it sits, in O(1). Pre: it is a member."""
        prev = block.prev_free_block
        nxt = block.next_free_block
        if prev is None or nxt is None or block is self._root:
            raise BlockPoolError(
                "remove", "queue-membership", "the block is not in the free queue", block.block_id
            )
        # Neighbours now point at each other (L2); the block is outside (L1).
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1  # L3

    # ------------------------------------------- removals spliced out in place
    #
    # A caller that walks its own list of blocks (the pool's touch) may take free blocks
    # out itself, with the two assignments ``remove`` makes (``prev.next = next``,
    # ``next.prev = prev``), leaving each block's own links as they were; it then
    # finishes the batch here, or, if it gives up half way, undoes it here.

    def finish_removals(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Complete a batch spliced out in place: each block is outside (L1) and no longer
        counted (L3)."""
        for blk in blocks:
            blk.prev_free_block = blk.next_free_block = None
        self.num_free_blocks -= len(blocks)

    @staticmethod
    def undo_removals(blocks: Sequence[KVCacheBlock]) -> None:
        """Put back a batch spliced out in place (links kept), last first, so that each
        block goes back between the neighbours it had when it was taken out (L2)."""
        for blk in reversed(blocks):
            before = blk.prev_free_block
            after = blk.next_free_block
            assert before is not None and after is not None
            before.next_free_block = blk
            after.prev_free_block = blk

    # ----------------------------------------------------------------- put in

    def append(self, block: KVCacheBlock) -> None:
        """Put ``block`` at the back. Pre: it is not a member."""
        if block.prev_free_block is not None or block.next_free_block is not None:
            raise BlockPoolError(
                "append", "queue-membership", "the block is already linked", block.block_id
            )
        root = self._root
        last = root.prev_free_block
        assert last is not None  # L1: the root is always linked
        # New member between the old back and the root, linked both ways (L1, L2).
        block.prev_free_block = last
        block.next_free_block = root
        last.next_free_block = block
        root.prev_free_block = block
        self.num_free_blocks += 1  # L3

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Put ``blocks`` at the back, in the given order. Pre: none is a member.

        A block that is already linked (or listed twice) is refused and the
        queue is left as it was.
        """
        root = self._root
        old_last = root.prev_free_block
        assert old_last is not None
        prev = old_last
        for blk in blocks:
            if blk.prev_free_block is not None or blk.next_free_block is not None:
                self._unchain(old_last, root, prev)
                raise BlockPoolError(
                    "append_n", "queue-membership", "the block is already linked", blk.block_id
                )
            # Chain forward from the old back; the ring stays open at the end
            # until the final splice (L2 is restored below).
            blk.prev_free_block = prev
            prev.next_free_block = blk
            prev = blk
        # Close the ring: the last new block is the new back (L1, L2).
        prev.next_free_block = root
        root.prev_free_block = prev
        self.num_free_blocks += len(blocks)  # L3

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Put ``blocks`` at the front: ``blocks[0]`` becomes the front, order kept,
        all ahead of the old front. Pre: none is a member.
        """
        root = self._root
        old_first = root.next_free_block
        assert old_first is not None
        prev = root
        for blk in blocks:
            if blk.prev_free_block is not None or blk.next_free_block is not None:
                self._unchain(root, old_first, prev)
                raise BlockPoolError(
                    "prepend_n", "queue-membership", "the block is already linked", blk.block_id
                )
            # Chain forward from the root; the old front is re-attached below.
            blk.prev_free_block = prev
            prev.next_free_block = blk
            prev = blk
        # The last new block sits just ahead of the old front (L2).
        prev.next_free_block = old_first
        old_first.prev_free_block = prev
        self.num_free_blocks += len(blocks)  # L3

    def _unchain(self, before: KVCacheBlock, after: KVCacheBlock, last: KVCacheBlock) -> None:
        """Undo a partly chained batch (error path only): restore L1 and L2.

        The batch was chained forward from ``before``; ``last`` is the last
        block chained so far (``before`` itself when none was).
        """
        blk = before
        while blk is not last:
            nxt = blk.next_free_block
            assert nxt is not None
            if blk is not before:
                blk.prev_free_block = blk.next_free_block = None
            blk = nxt
        if last is not before:
            last.prev_free_block = last.next_free_block = None
        before.next_free_block = after
        after.prev_free_block = before

    # ------------------------------------------------------------------- read

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """The members front to back (for tests and checks)."""
        root = self._root
        out: list[KVCacheBlock] = []
        blk = root.next_free_block
        while blk is not root:
            assert blk is not None
            out.append(blk)
            blk = blk.next_free_block
        return out

    def __len__(self) -> int:
        return self.num_free_blocks
