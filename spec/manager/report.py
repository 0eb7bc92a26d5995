"""A request's KV-cache report mode: whether its prefix-cache hits are published again.

A request in the ``"incremental"`` mode (the default) is reported only by the stores of
the blocks it caches. A request in the ``"full"`` mode (vLLM 0.33+, for routers that
rebuild whole prefix chains) also has its hits published again when it is looked up, at
admission and at every resume, whether or not it then finds room:

- one ``BlockStored`` per group whose hit is not empty, naming the hashes of the hit's
  blocks from the request's first, with no parent, at the group's block size;
- a sliding window's hit counts its leading null blocks too, so the stores name the
  blocks outside the window that the group does not hold;
- nothing in the pool changes: no key is added, no block is touched, and no
  ``BlockRemoved`` ever answers such a store.

The manager keeps what it re-sent during its latest action (:attr:`ManagerState.resent`);
:func:`resent_events` names it in the pool's events, whose hash naming (a coarse block's
hash) is the pool's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..caching import coarse_block_hash
from ..events import BlockStored
from ..state import PoolState

ReportMode = Literal["incremental", "full"]
INCREMENTAL: ReportMode = "incremental"
FULL: ReportMode = "full"
REPORT_MODES: tuple[ReportMode, ...] = (INCREMENTAL, FULL)


@dataclass(frozen=True)
class ResentStore:
    """The hits of one group published again: its first ``num_blocks`` blocks of
    ``block_size`` tokens, named from the request's chained ``block_hashes`` (at the
    pool's ``hash_block_size``)."""

    group_id: int
    block_hashes: tuple[bytes, ...]
    num_blocks: int
    block_size: int


def resent_stores(
    mode: str, events_on: bool, hashes: tuple[bytes, ...], hit_tables: tuple[tuple[int, ...], ...],
    block_size: int,
) -> tuple[ResentStore, ...]:  # fmt: skip
    """What a lookup of a request in ``mode`` re-sends, given its hit per group (null
    blocks included): nothing unless events are on and the mode is ``"full"``."""
    if mode != FULL or not events_on:
        return ()
    return tuple(
        ResentStore(g, hashes, len(table), block_size)
        for g, table in enumerate(hit_tables)
        if table
    )


def resent_events(state: PoolState, resent: tuple[ResentStore, ...]) -> tuple[BlockStored, ...]:
    """The ``BlockStored`` events of ``resent``, with the hashes ``state``'s pool gives its
    blocks of that size."""
    return tuple(
        BlockStored(
            block_hashes=tuple(
                coarse_block_hash(state, r.block_hashes, r.block_size, i)
                for i in range(r.num_blocks)
            ),
            parent_block_hash=None,
            group_id=r.group_id,
            block_size=r.block_size,
            num_tokens=r.num_blocks * r.block_size,
        )
        for r in resent
    )
