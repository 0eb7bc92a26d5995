"""The request level's named properties, as checks over plain values.

Each check takes what can be seen from outside a manager (tables, the pool's ref counts and
keys, the engine's record of block contents) and returns the ways the property is broken,
so the same checks judge the spec and any manager under test. The ids are stable: reports,
traces and the docs quote them.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..flat import block_writable
from ..keys import hash_at_block_size, make_key
from ..state import NULL_BLOCK
from .config import KVGroup
from .extra_keys import Signature, differing
from .flat import growth_break, resume_promise
from .state import BlockData, Tables

PROPERTIES: dict[str, str] = {
    "append-only": "a running request's table in a full-attention group only grows: "
    "the new table starts with the previous one",
    "append-only-up-to-null": "a sliding-window group's table only grows, except that "
    "entries that left the window may become the null block",
    "write-guard": "KV is written or copied only into a writable block: not null, held "
    "once (by the writer), with no key (for a manager that keys a block when it schedules "
    "it, before the write: not null, held once)",
    "hit-keys": "every cached block in a request's table (a hit, or registered by it) "
    "carries the key of the request's own prefix hash there, salt included; a different "
    "salt never hits",
    "own-contents": "every block a request reads holds that request's own tokens under its "
    "own salt",
    "refcounts-match-tables": "a block's ref_cnt equals the number of table entries that hold it",
    "idle-pool-free": "once every request is freed, every block is free and "
    "reset_prefix_cache succeeds",
    "resume-finds-prefix": "a preempted request, resumed, hits at least the prefix that "
    "the blocks it left cached can serve (in every group), if none of them lost its key",
    "tail-first-free": "a request's blocks are freed tail first: within a group, a later "
    "block is evicted before an earlier one",
    "computes-last-token": "a request scheduled from its cached prefix (admitted or "
    "resumed) has at least its last token left to compute: the engine samples the next "
    "token from that token's logits, so a hit never covers the whole prompt",
    "keys-partitioned": "requests that differ, over a block's prefix, in an attribute the "
    "profile partitions the prefix cache by (cache salt, LoRA adapter, multimodal features "
    "and their offsets, prompt embeddings) never share that block: a hit block was "
    "written by a request agreeing with the reader in every such attribute",
    "keys-shared": "the positive control of keys-partitioned: an admitted request whose "
    "full-attention prefix is cached under its own keys (left by requests agreeing with it "
    "in the tokens and every attribute) hits that prefix, short of its last token",
}


@dataclass(frozen=True)
class Broken:
    """One way a property is broken, naming the request and block where it shows."""

    property: str
    detail: str
    request_id: str | None = None
    block: int | None = None

    def __str__(self) -> str:
        where = [f"request {self.request_id!r}"] if self.request_id is not None else []
        where += [f"block {self.block}"] if self.block is not None else []
        return f"property '{self.property}' broken ({', '.join(where) or 'pool'}): {self.detail}"


def table_growth(
    request_id: str, groups: Sequence[KVGroup], old: Tables, new: Tables
) -> list[Broken]:
    """``append-only`` for full-attention groups, ``append-only-up-to-null`` for sliding ones."""
    broken = []
    for g, (group, before, after) in enumerate(zip(groups, old, new, strict=True)):
        name = "append-only-up-to-null" if group.is_sliding else "append-only"
        where = growth_break(tuple(before), tuple(after), group.is_sliding)
        if where is None:
            continue
        if where == -1:
            broken.append(
                Broken(
                    name,
                    f"group {g}: table shrank from {list(before)} to {list(after)}",
                    request_id,
                )
            )
            continue
        was, now = before[where], after[where]
        broken.append(
            Broken(
                name,
                f"group {g}: entry {where} changed from block {was} to {now} "
                f"({list(before)} -> {list(after)})",
                request_id,
                was,
            )
        )
    return broken


def writable(ref_cnt: int, keys: frozenset[bytes], block: int) -> bool:
    return block_writable(ref_cnt, bool(keys), block)


def write_guard(
    request_id: str, block: int, ref_cnt: int, keys: frozenset[bytes], what: str
) -> list[Broken]:
    """``write-guard`` for one write (or copy) into ``block``."""
    if writable(ref_cnt, keys, block):
        return []
    why = (
        "the null block"
        if block == NULL_BLOCK
        else f"{len(keys)} key(s)"
        if keys
        else f"ref_cnt {ref_cnt}"
    )
    return [Broken("write-guard", f"{what} into block {block}, which has {why}", request_id, block)]


def expected_key(
    hashes: Sequence[bytes], hash_block_size: int, block_size: int, index: int, group: int
) -> bytes:
    return make_key(hash_at_block_size(hashes, hash_block_size, block_size, index), group)


def hit_keys(
    request_id: str,
    tables: Tables,
    num_computed_tokens: int,
    hashes: Sequence[bytes],
    hash_block_size: int,
    block_size: int,
    keys_of: Callable[[int], frozenset[bytes]],
) -> list[Broken]:
    """``hit-keys``: every block before the computed boundary carries the request's key."""
    broken = []
    for g, table in enumerate(tables):
        for i, block in enumerate(table[: num_computed_tokens // block_size]):
            if block == NULL_BLOCK:
                continue
            key = expected_key(hashes, hash_block_size, block_size, i, g)
            if key not in keys_of(block):
                broken.append(
                    Broken(
                        "hit-keys",
                        f"group {g} entry {i}: the block does not carry the "
                        f"request's key {key.hex()[:12]}",
                        request_id,
                        block,
                    )
                )
    return broken


def computed_entries(
    tables: Tables, num_computed_tokens: int, block_size: int
) -> Iterator[tuple[int, int, int, int, int]]:
    """Every real table entry that holds computed tokens, as ``(group, entry, block, start,
    end)``: the entry holds the request's tokens ``start`` to ``end - 1``."""
    for g, table in enumerate(tables):
        for i, block in enumerate(table):
            start = i * block_size
            if block == NULL_BLOCK or start >= num_computed_tokens:
                continue
            yield g, i, block, start, min(start + block_size, num_computed_tokens)


def own_contents(
    request_id: str,
    tables: Tables,
    num_computed_tokens: int,
    tokens: Sequence[int],
    salt: str | None,
    block_size: int,
    contents: Mapping[int, BlockData],
) -> list[Broken]:
    """``own-contents``: the computed part of every table block is the request's own."""
    broken = []
    for g, i, block, start, end in computed_entries(tables, num_computed_tokens, block_size):
        want = tuple(tokens[start:end])
        data = contents.get(block)
        if data is None or data.salt != salt or data.tokens[: len(want)] != want:
            seen = "nothing" if data is None else f"{list(data.tokens)} (salt {data.salt!r})"
            broken.append(
                Broken(
                    "own-contents",
                    f"group {g} entry {i} should hold {list(want)} "
                    f"(salt {salt!r}) but holds {seen}",
                    request_id,
                    block,
                )
            )
    return broken


def refcounts(all_tables: Sequence[Tables], ref_cnt: Sequence[int]) -> list[Broken]:
    """``refcounts-match-tables`` over every real block."""
    holds = Counter(b for tables in all_tables for t in tables for b in t if b != NULL_BLOCK)
    return [
        Broken(
            "refcounts-match-tables",
            f"ref_cnt {ref_cnt[b]} but {holds[b]} table entries hold it",
            None,
            b,
        )
        for b in range(1, len(ref_cnt))
        if ref_cnt[b] != holds[b]
    ]


def idle_pool(num_blocks: int, free_count: int, reset_result: bool | None = None) -> list[Broken]:
    """``idle-pool-free``, for a pool no request holds a block of."""
    broken = []
    if free_count != num_blocks - 1:
        broken.append(Broken("idle-pool-free", f"{free_count} of {num_blocks - 1} blocks free"))
    if reset_result is False:
        broken.append(Broken("idle-pool-free", "reset_prefix_cache refused"))
    return broken


def resume_prefix(
    request_id: str, kept_blocks: int, num_computed_tokens: int, num_tokens: int, block_size: int
) -> list[Broken]:
    """``resume-finds-prefix``: the blocks the request left can serve ``kept_blocks``
    leading blocks (a hit is capped so that one token is always computed)."""
    want = resume_promise(kept_blocks, num_tokens, block_size)
    if num_computed_tokens >= want:
        return []
    return [
        Broken(
            "resume-finds-prefix",
            f"resumed with {num_computed_tokens} cached tokens; its "
            f"{kept_blocks} cached block(s) still hold {want}",
            request_id,
        )
    ]


def tail_first(
    request_id: str, tables: Tables, freed: frozenset[int], free_queue: Sequence[int]
) -> list[Broken]:
    """``tail-first-free``: among ``freed`` blocks of each table, later entries sit nearer
    the front of the free queue."""
    position = {b: i for i, b in enumerate(free_queue)}
    broken = []
    for g, table in enumerate(tables):
        placed = [(i, position[b], b) for i, b in enumerate(table) if b in freed and b in position]
        for (i, pi, bi), (j, pj, bj) in itertools.pairwise(placed):
            if pj > pi:
                broken.append(
                    Broken(
                        "tail-first-free",
                        f"group {g}: entry {j} (block {bj}) will be "
                        f"evicted after entry {i} (block {bi})",
                        request_id,
                        bj,
                    )
                )
                break
    return broken


def computes_last_token(request_id: str, num_computed_tokens: int, num_tokens: int) -> list[Broken]:
    """``computes-last-token``: a (re)scheduled request has a token left to compute."""
    if num_computed_tokens < num_tokens:
        return []
    return [
        Broken(
            "computes-last-token",
            f"scheduled with all {num_tokens} tokens cached: nothing left to compute, so no "
            "logits to sample from",
            request_id,
        )
    ]


def keys_partitioned(
    request_id: str,
    tables: Tables,
    num_computed_tokens: int,
    reader: Signature,
    origin_of: Callable[[int], Signature | None],
    block_size: int,
    hash_block_size: int,
    partitions: frozenset[str],
) -> list[Broken]:
    """``keys-partitioned``: every block a (re)scheduled request reads from the cache was
    written by a request agreeing with it, over the prefix read, in every attribute of
    ``partitions`` (``origin_of`` names the writer; ``None``: unknown, not judged)."""
    broken = []
    for g, i, block, _, end in computed_entries(tables, num_computed_tokens, block_size):
        writer = origin_of(block)
        if writer is None:
            continue
        apart = sorted(differing(reader, writer, end, hash_block_size) & partitions)
        if apart:
            broken.append(
                Broken(
                    "keys-partitioned",
                    f"group {g} entry {i} was written by a request that differs in "
                    f"{', '.join(apart)} over tokens 0..{end - 1}",
                    request_id,
                    block,
                )
            )
    return broken


def keys_shared(
    request_id: str, num_computed_tokens: int, cached_blocks: int, num_tokens: int, block_size: int
) -> list[Broken]:
    """``keys-shared``: a new request hits at least the ``cached_blocks`` leading blocks
    the cache held under its keys (a hit stops short of the last token)."""
    want = min(cached_blocks, (num_tokens - 1) // block_size) * block_size
    if num_computed_tokens >= want:
        return []
    return [
        Broken(
            "keys-shared",
            f"admitted with {num_computed_tokens} cached tokens although the cache held "
            f"{want} tokens of its prefix under its own keys, left by requests agreeing with "
            "it in every attribute",
            request_id,
        )
    ]
