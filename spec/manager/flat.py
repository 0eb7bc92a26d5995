"""The request level's key rules as small pure functions over flat data, with contracts.

Block tables are tuples of block ids (0 is the null block). The PEP 316 ``pre:`` / ``post:``
lines are what ``kvpool crosshair`` searches for counterexamples; the manager model and the
property checks of :mod:`properties` call these functions, so the search covers the
oracle's own code. A search that finds nothing is evidence, not proof.
"""

from __future__ import annotations

# the contracts' search bounds, read by CrossHair from the pre: lines
from ..bounds import search_blocks, search_count, search_request  # noqa: F401
from ..flat import NULL

__all__ = ["growth_break", "resume_promise", "slide_table", "written_entries"]


def starts_with(table: tuple[int, ...], prefix: tuple[int, ...]) -> bool:
    """``table`` begins with ``prefix``, entry for entry."""
    return len(table) >= len(prefix) and all(table[i] == prefix[i] for i in range(len(prefix)))


def up_to_null(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    """Every old entry is kept, or (a sliding window's) replaced by the null block."""
    return all(a in (b, NULL) for a, b in zip(after, before, strict=False))


def growth_break(before: tuple[int, ...], after: tuple[int, ...], sliding: bool) -> int | None:
    """Where ``after`` breaks the growth rule for a table that was ``before``: ``None`` if it
    does not, ``-1`` if the table shrank, else the first entry that changed.

    A full-attention table is append-only (``before`` is a prefix of ``after``); a
    sliding-window table is append-only up to null (old entries may become the null block).

    pre: search_blocks(before, after)
    pre: all(0 <= b for b in before + after)
    post: __return__ is not None or len(after) >= len(before)
    post: __return__ is not None or sliding or starts_with(after, before)
    post: __return__ is not None or up_to_null(before, after)
    post: __return__ is None or __return__ == -1 or after[__return__] != before[__return__]
    post: __return__ is None or __return__ == -1 or not sliding or after[__return__] != NULL
    post: not starts_with(after, before) or __return__ is None
    """
    if len(after) < len(before):
        return -1
    for i, (was, now) in enumerate(zip(before, after, strict=False)):
        if was != now and not (sliding and now == NULL):
            return i
    return None


def slide_table(table: tuple[int, ...], cut: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A sliding-window group's table once its first ``cut`` entries left the window: they
    become the null block. Returns the new table and the real blocks that left it, tail
    first (the order they are freed in). ``cut == 0`` (always, for a full-attention group):
    nothing changes.

    pre: search_blocks(table)
    pre: cut <= len(table)
    pre: all(0 <= b for b in table)
    pre: len(set(b for b in table if b)) == len([b for b in table if b])
    pre: 0 <= cut
    pre: search_count(cut)
    post: growth_break(table, __return__[0], True) is None
    post: len(__return__[0]) == len(table)
    post: cut != 0 or __return__ == (table, ())
    post: NULL not in __return__[1] and set(__return__[1]) <= set(table)
    post: set(__return__[1]) == set(table) - set(__return__[0])
    post: list(__return__[1]) == sorted(__return__[1], key=lambda b: -table.index(b))
    """
    dropped = tuple(b for b in reversed(table[:cut]) if b != NULL)
    return (NULL,) * cut + table[cut:], dropped


def covers_pending(
    entries: list[tuple[int, int]], num_computed: int, num_tokens: int, groups: int, size: int
) -> bool:
    """Every pending token's block, in every group, is among ``entries``."""
    pending = range(num_computed, num_tokens)
    return all((g, t // size) in entries for g in range(groups) for t in pending)


def written_entries(
    num_computed: int, num_tokens: int, num_groups: int, block_size: int
) -> list[tuple[int, int]]:
    """``(group, index)`` of every table entry that receives one of the pending tokens
    ``num_computed .. num_tokens - 1``.

    pre: 0 <= num_computed <= num_tokens
    pre: 1 <= num_groups
    pre: 1 <= block_size
    pre: search_request(num_tokens, num_groups, block_size)
    post: all(i * block_size < num_tokens for _, i in __return__)
    post: all((i + 1) * block_size > num_computed for _, i in __return__)
    post: len(__return__) == len(set(__return__))
    post: all(0 <= g < num_groups for g, _ in __return__)
    post: covers_pending(__return__, num_computed, num_tokens, num_groups, block_size)
    """
    if num_computed >= num_tokens:
        return []
    first, last = num_computed // block_size, (num_tokens - 1) // block_size
    return [(g, i) for g in range(num_groups) for i in range(first, last + 1)]


def resume_promise(kept_blocks: int, num_tokens: int, block_size: int) -> int:
    """How many tokens a resumed request must find cached when ``kept_blocks`` leading
    blocks of its prefix are still cached: whole blocks only, and never the last token (a
    hit is capped so that at least one token is computed).

    pre: 0 <= kept_blocks
    pre: 1 <= num_tokens
    pre: 1 <= block_size
    pre: search_request(num_tokens, 1, block_size, kept_blocks)
    post: __return__ >= 0
    post: __return__ % block_size == 0
    post: __return__ <= kept_blocks * block_size
    post: __return__ < num_tokens
    post: __return__ + block_size >= num_tokens or __return__ == kept_blocks * block_size
    """
    return min(kept_blocks * block_size, (num_tokens - 1) // block_size * block_size)
