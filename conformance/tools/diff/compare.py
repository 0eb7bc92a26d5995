"""Comparing what pool A and pool B did with one action, and what they show afterwards.

Block ids of B are read through the :class:`~.renaming.Renaming` (the identity at
``order``). Each function returns human-readable differences, empty when the two agree;
every message starts with the operation (``free_blocks: ...``) or ``after OPERATION`` so
that :func:`~..lockstep.signature` tells kinds of difference apart.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass

from kvpool.spec import (
    Action,
    GetCachedBlock,
    GetNewBlocks,
    Observation,
    PeerGetNewBlocks,
    ResetPrefixCache,
    TakeEvents,
    canonical_events,
)

from ...machines.pool.target import PoolView
from ...report import short
from .renaming import Renaming


def block_ids(result: object) -> tuple[int, ...]:
    """The block ids in a result (``()`` for a result that is not a list of blocks)."""
    if not isinstance(result, tuple):
        return ()
    return tuple(b for b in result if isinstance(b, int))


def show(value: object) -> str:
    """A result as it reads in a message: block lists as lists, keys in hex."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        return f"blocks {list(value)}"
    return repr(value)


def compare_results(
    action: Action,
    a: Observation,
    b: Observation,
    observes: frozenset[str],
    main: Renaming,
    peer: Renaming | None,
) -> list[str]:
    """Differences between A's and B's result (and reuse-watcher firings)."""
    op = action.operation
    problems: list[str] = []
    got_a, got_b = a.result, b.result
    if isinstance(action, TakeEvents):
        if "events" in observes:
            assert isinstance(got_a, tuple) and isinstance(got_b, tuple)
            if canonical_events(got_a) != canonical_events(got_b):  # type: ignore[arg-type]
                problems.append(f"{op}: events differ: A {_events(got_a)}, B {_events(got_b)}")
    elif isinstance(got_a, float) or isinstance(got_b, float):
        if not (
            isinstance(got_a, int | float)
            and isinstance(got_b, int | float)
            and math.isclose(got_a, got_b, rel_tol=1e-9, abs_tol=1e-12)
        ):
            problems.append(f"{op}: results differ: A {got_a!r}, B {got_b!r}")
    elif isinstance(action, GetNewBlocks | PeerGetNewBlocks | GetCachedBlock):
        renaming = peer if isinstance(action, PeerGetNewBlocks) else main
        assert renaming is not None
        as_b = None if got_a is None else tuple(renaming.to_b(x) for x in block_ids(got_a))
        if as_b != got_b:
            problems.append(
                f"{op}: results differ: A {show(got_a)}, B {show(got_b)}" + _as_a(renaming, got_b)
            )
    elif got_a != got_b:
        problems.append(f"{op}: results differ: A {show(got_a)}, B {show(got_b)}")
    if "watchers" in observes:
        fired_a = [(main.to_b(x), name) for x, name in a.fired]
        fired_b = list(b.fired)
        if isinstance(action, ResetPrefixCache):
            fired_a, fired_b = sorted(fired_a), sorted(fired_b)
        if fired_a != fired_b:
            problems.append(
                f"{op}: reuse watchers fired: A {list(a.fired)}, B {list(b.fired)}"
                + _as_a(main, tuple(x for x, _ in b.fired))
            )
    return problems


def _as_a(renaming: Renaming, got_b: object) -> str:
    """B's block ids as A's, when the renaming makes them differ (safety)."""
    if renaming.identity or not isinstance(got_b, tuple):
        return ""
    return f" (A's {[renaming.to_a(y) for y in got_b]})"


def compare_views(
    a: PoolView, b: PoolView, main: Renaming, exact_order: bool, peer: Renaming | None = None
) -> list[str]:
    """Differences between what A and B show of their state, B's blocks renamed to A's."""
    problems: list[str] = []
    if a.free_count != b.free_count:
        problems.append(f"free count: A {a.free_count}, B {b.free_count}")
    if a.free_queue is not None and b.free_queue is not None:
        queue_b = [main.to_a(y) for y in b.free_queue]
        if exact_order and list(a.free_queue) != queue_b:
            problems.append(
                f"free queue order: A {list(a.free_queue)}, B {list(b.free_queue)}"
                + _as_a(main, b.free_queue)
            )
        elif set(a.free_queue) != set(queue_b):
            only_a = sorted(set(a.free_queue) - set(queue_b))
            only_b = sorted(set(queue_b) - set(a.free_queue))
            problems.append(
                f"free blocks differ: free only in A {only_a}, free only in B {only_b} (A's ids)"
            )
    if a.ref_cnt is not None and b.ref_cnt is not None:
        for x in range(1, len(a.ref_cnt)):  # the null block's count is not maintained
            if a.ref_cnt[x] != b.ref_cnt[main.to_b(x)]:
                problems.append(
                    f"ref_cnt of block {x}: A {a.ref_cnt[x]}, B {b.ref_cnt[main.to_b(x)]}"
                    + _b_id(main, x)
                )
    if a.keys is not None and b.keys is not None:
        for x in range(len(a.keys)):
            keys_a, keys_b = a.keys[x], b.keys[main.to_b(x)]
            if keys_a != keys_b:
                problems.append(
                    f"keys of block {x}: A {_hexes(keys_a)}, B {_hexes(keys_b)}" + _b_id(main, x)
                )
            elif a.primary is not None and b.primary is not None:
                primary_a, primary_b = a.primary[x], b.primary[main.to_b(x)]
                if primary_a != primary_b:
                    problems.append(
                        f"primary key of block {x}: A {_hex(primary_a)}, B {_hex(primary_b)}"
                        + _b_id(main, x)
                    )
    if a.peer is not None and b.peer is not None and peer is not None:
        problems += [f"peer pool: {p}" for p in compare_views(a.peer, b.peer, peer, exact_order)]
    return problems


def _b_id(renaming: Renaming, x: int) -> str:
    """B's id for A's block ``x``, when the renaming makes it differ (safety)."""
    y = renaming.to_b(x)
    return "" if x == y else f" (B's block {y})"


def _events(events: tuple[object, ...]) -> str:
    """Events in one line, hashes shortened to 8 hex digits."""
    return "[" + ", ".join(_event(e) for e in events) + "]"


def _event(event: object) -> str:
    if not is_dataclass(event):
        return repr(event)
    args = ", ".join(f"{f.name}={short(getattr(event, f.name))}" for f in fields(event))
    return f"{type(event).__name__}({args})"


def _hexes(keys: frozenset[bytes]) -> str:
    return "[" + ", ".join(sorted(k.hex()[:16] for k in keys)) + "]"


def _hex(key: bytes | None) -> str:
    return "none" if key is None else key.hex()[:16]
