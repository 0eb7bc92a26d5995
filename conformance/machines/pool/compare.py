"""Comparing what a target did with what the spec says it must do.

Each function returns human-readable differences (empty when they agree); every message
names the operation and, where there is one, the block.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kvpool.spec import NULL_BLOCK, Action, Observation, PoolState, canonical_events
from kvpool.spec.events import as_consumers_read
from kvpool.spec.keys import GROUP_ID_BYTES, group_of, hash_of

from ...engines.builtin.spec_target import index_part, keys_part, primary_part
from .target import FINE_EVENT_HASHES, Index, Lookups, PoolView


def compare_observation(
    action: Action, expected: Observation, actual: Observation, observes: frozenset[str]
) -> list[str]:
    """Differences between the result (and watcher firings) the spec expects and the target's."""
    op = action.operation
    problems: list[str] = []
    want, got = expected.result, actual.result
    if op == "take_events":
        if "events" in observes:
            assert isinstance(want, tuple) and isinstance(got, tuple)
            want = as_consumers_read(want, FINE_EVENT_HASHES in observes)  # type: ignore[arg-type]
            if canonical_events(want) != canonical_events(got):  # type: ignore[arg-type]
                problems.append(f"{op}: events differ: expected {list(want)}, got {list(got)}")
    elif isinstance(want, float) or isinstance(got, float):
        if not (
            isinstance(got, int | float)
            and isinstance(want, int | float)
            and math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12)
        ):
            problems.append(f"{op}: expected {want!r}, got {got!r}")
    elif want != got:
        problem = f"{op}: expected {_show(want)}, got {_show(got)}"
        if op == "get_cached_block":
            problem += f" ({INDEX_RULE})"
        problems.append(problem)
    if "watchers" in observes and expected.fired != actual.fired:
        problems.append(
            f"{op}: reuse watchers fired: expected {list(expected.fired)}, got {list(actual.fired)}"
        )
    return problems


def _show(value: object) -> str:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return f"blocks {list(value)}"
    return repr(value)


#: What a wrong lookup or a wrong index entry breaks.
INDEX_RULE = (
    "invariant 'map-matches-block-keys': a key is in the index exactly when a block carries it"
)


def compare_views(
    state: PoolState, actual: PoolView, exact_order: bool, where: str = ""
) -> list[str]:
    """Differences between the spec's state and what the target shows of its own.

    Each part of the view is first compared whole (a tuple compare, in C); only a part
    that differs is gone through block by block for the message. The spec's side of a part
    is built only where the target shows that part."""
    problems: list[str] = []
    want_count = len(state.free_queue)
    if want_count != actual.free_count:
        problems.append(f"{where}free count: expected {want_count}, got {actual.free_count}")
    queue, want_queue = actual.free_queue, state.free_queue
    if queue is not None and queue != want_queue:
        if exact_order:
            problems.append(
                f"{where}free queue order: expected {list(want_queue)}, got {list(queue)}"
            )
        elif set(queue) != set(want_queue):
            missing = sorted(set(want_queue) - set(queue))
            extra = sorted(set(queue) - set(want_queue))
            problems.append(f"{where}free blocks differ: missing {missing}, unexpected {extra}")
        if len(set(queue)) != len(queue):
            problems.append(f"{where}the free queue lists a block twice: {list(queue)}")
    want_ref_cnt = state.ref_cnt
    if actual.ref_cnt is not None and actual.ref_cnt != want_ref_cnt:
        # the null block's count only where the profile keeps it still (it stays 0)
        first = 1 if state.profile.null_ref_cnt_moves else 0
        for b in range(first, state.num_blocks):
            if actual.ref_cnt[b] != want_ref_cnt[b]:
                problems.append(
                    f"{where}block {b}: ref_cnt expected {want_ref_cnt[b]}, got {actual.ref_cnt[b]}"
                )
    if actual.keys is not None and actual.keys != (want_keys := keys_part(state)):
        for b in range(state.num_blocks):
            if actual.keys[b] != want_keys[b]:
                problems.append(
                    f"{where}{_null_keyed(b)}block {b}: keys expected "
                    f"{sorted(k.hex() for k in want_keys[b])}, got "
                    f"{sorted(k.hex() for k in actual.keys[b])}"
                )
    if actual.primary is not None and actual.primary != (want_primary := primary_part(state)):
        want_keys = keys_part(state)
        keys_seen = actual.keys if actual.keys is not None else want_keys
        for b in range(state.num_blocks):
            # A block whose key set differs was reported above; here: which key is primary.
            if actual.primary[b] != want_primary[b] and keys_seen[b] == want_keys[b]:
                problems.append(
                    f"{where}block {b}: primary key expected "
                    f"{_hex(want_primary[b])}, got {_hex(actual.primary[b])}"
                )
    if actual.index is not None and actual.index != (want_index := index_part(state)):
        problems += compare_index(want_index, actual.index, exact_order, where)
    if actual.lookups is not None:
        problems += compare_lookups(state.cache, actual.lookups, exact_order, where)
    if actual.peer is not None and state.peer is not None:
        problems += compare_views(state.peer, actual.peer, exact_order, where="peer pool: ")
    return problems


def _null_keyed(block: int) -> str:
    """What a key on the null block breaks, said first (it names the finding): a lookup
    of that key hands the null block out as a cache hit."""
    if block != NULL_BLOCK:
        return ""
    return (
        "the null block was cached (invariant 'null-block-inert': a lookup of its key "
        "hands it out as a cache hit): "
    )


def compare_index(want: Index, actual: Index, exact_order: bool, where: str = "") -> list[str]:
    """Differences between the spec's prefix-cache index and the target's, key by key.

    A key the target's index holds for a block the spec's does not is the worst a pool can
    do: the next request with that prefix reads another request's KV. Duplicates of a key
    are compared in lookup order where the order is exact, as a set otherwise.
    """
    expected, got = dict(want), dict(actual)
    problems = []
    for key in sorted(expected.keys() | got.keys()):
        blocks_want, blocks_got = expected.get(key, ()), got.get(key, ())
        same = blocks_want == blocks_got if exact_order else set(blocks_want) == set(blocks_got)
        if same and len(set(blocks_got)) == len(blocks_got):
            continue
        problems.append(
            f"{where}index: key {_key_text(key)} maps to blocks {list(blocks_got)}, expected "
            f"{list(blocks_want)} ({INDEX_RULE})"
        )
    return problems


def compare_lookups(
    cache: Mapping[bytes, tuple[int, ...]], lookups: Lookups, exact_order: bool, where: str = ""
) -> list[str]:
    """Differences between what the pool's lookups answered for the probed keys and the
    spec's index: a hit exactly when some block carries the key, on the block the spec's
    lookup returns (the earliest cached) where the order is exact, on any block carrying
    the key otherwise."""
    problems = []
    for key, got in lookups:
        blocks = cache.get(key, ())
        allowed = blocks[:1] if exact_order else blocks
        if got is None and not blocks:
            continue
        if got is None:
            found = f"missed, but blocks {list(blocks)} carry it"
        elif not blocks:
            found = f"returned block {got}, but no block carries it"
        elif got in allowed:
            continue
        else:
            found = f"returned block {got}, expected one of blocks {list(allowed)}"
        problems.append(
            f"{where}lookup: get_cached_block of key {_key_text(key)} {found} ({INDEX_RULE})"
        )
    return problems


def _key_text(key: bytes) -> str:
    """A key as hash and group, the way a reader finds it in the action list."""
    if len(key) <= GROUP_ID_BYTES:
        return key.hex()
    return f"{hash_of(key).hex()} (group {group_of(key)})"


def _hex(key: bytes | None) -> str:
    return "none" if key is None else key.hex()


def view_changes(before: PoolView, after: PoolView) -> list[str]:
    """What changed between two views of one target (for refused actions), block by block
    where the view is per block, keys in hex."""
    changes = []
    for name in ("free_count", "free_queue", "ref_cnt", "keys", "primary", "index", "peer"):
        old, new = getattr(before, name), getattr(after, name)
        if old == new:
            continue
        if name in ("ref_cnt", "keys", "primary") and old is not None and new is not None:
            for b, (was, now) in enumerate(zip(old, new, strict=False)):
                if was != now:
                    changes.append(f"block {b}: {name} changed from {_plain(was)} to {_plain(now)}")
        else:
            changes.append(f"{name} changed from {_plain(old)} to {_plain(new)}")
    return changes


def _plain(value: object) -> str:
    """A view value as it reads in a message: keys in hex, sets sorted."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, frozenset):
        return "{" + ", ".join(sorted(_plain(v) for v in value)) + "}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    return repr(value)
