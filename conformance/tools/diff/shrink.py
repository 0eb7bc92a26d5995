"""Shrinking a difference to the shortest action sequence on the smallest pool.

The suite's one shrinker (:func:`~..engine.shrink.shrink_sequence`) does the work and keeps
the kind of the difference; the replay runs pool A against pool B. What a diff adds are
ways to simplify and rewrite, handed to that shrinker: naming a lower block (block 5
becomes block 1, say), so that the actions that only made block 5 exist can then be dropped
and the pool made smaller, in one action or throughout the sequence; and, for short
sequences, dropping one action while simplifying another.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

from kvpool.spec import NULL_BLOCK, PoolConfig

from ...machines.pool.levels import Level
from ...machines.pool.runner import Failure
from ...search.shrink import Replay, _simpler, _smaller_pools, shrink_sequence
from .loading import Pair
from .pair import BLOCK_FIELDS, replay

#: The longest sequence the drop-one-simplify-another pass is tried on (it is quadratic).
MAX_PAIRED = 8


def lower_blocks(action: Any) -> list[Any]:
    """Variants of ``action`` naming one block lower, each block id in turn (never the
    null block: a variant must stay the same kind of action)."""
    variants = []
    for f in fields(action):
        if f.name not in BLOCK_FIELDS:
            continue
        value = getattr(action, f.name)
        if isinstance(value, int) and value > NULL_BLOCK + 1:
            variants += [replace(action, **{f.name: low}) for low in range(1, value)]
        elif isinstance(value, tuple):
            for i, block in enumerate(value):
                if isinstance(block, int) and block > NULL_BLOCK + 1:
                    variants += [
                        replace(action, **{f.name: (*value[:i], low, *value[i + 1 :])})
                        for low in range(1, block)
                    ]
    return variants


def once_each(action: Any) -> list[Any]:
    """``action`` with every block listed once (``free_blocks([1, 1, 1])`` becomes
    ``free_blocks([1])``), when a block list names a block more than once."""
    variants = []
    for f in fields(action):
        value = getattr(action, f.name)
        if f.name in BLOCK_FIELDS and isinstance(value, tuple) and len(set(value)) < len(value):
            variants.append(replace(action, **{f.name: tuple(dict.fromkeys(value))}))
    return variants


def simpler(action: Any) -> list[Any]:
    """The suite's simpler variants of ``action`` first, then each block once, then lower
    block ids."""
    return [*_simpler(action), *once_each(action), *lower_blocks(action)]


def shrink_difference(
    pair: Pair, level: Level, found: Failure, budget_seconds: float = 20.0
) -> Failure:
    """The smallest pool and shortest action sequence showing the same kind of difference."""

    def replay_on(config: PoolConfig, skip: bool) -> Replay:
        def differs(candidate: list[Any]) -> tuple[str | None, list[Any]]:
            return replay(pair, level, config, candidate, skip_out_of_contract=skip)

        return differs

    config, trace, message = shrink_sequence(
        replay_on,
        _smaller_pools,
        simpler,
        found.config,
        found.trace,
        budget_seconds,
        rewrites=(_drop_and_simplify, _relabel),
    )
    return Failure(message, trace, config)


def mentioned(trace: Sequence[Any]) -> set[int]:
    """The blocks of the pool that ``trace``'s actions name."""
    named: set[int] = set()
    for action in trace:
        for f in fields(action):
            value = getattr(action, f.name)
            if f.name in BLOCK_FIELDS:
                named.update(value if isinstance(value, tuple) else (value,))
    return named


def relabelled(action: Any, old: int, new: int) -> Any:
    """``action`` naming block ``new`` wherever it named block ``old``."""
    changes: dict[str, Any] = {}
    for f in fields(action):
        value = getattr(action, f.name)
        if f.name in BLOCK_FIELDS and isinstance(value, tuple):
            changes[f.name] = tuple(new if b == old else b for b in value)
        elif f.name in BLOCK_FIELDS and value == old:
            changes[f.name] = new
    return replace(action, **changes) if changes else action


def _relabel(differs: Replay, trace: list[Any], deadline: float) -> tuple[list[Any], str] | None:
    """The same sequence naming a lower block, unused so far, wherever it named a higher one
    (block 2 everywhere becomes block 1), if it still shows the same kind of difference;
    the allocations that only made the higher block exist can then be shrunk away."""
    named = mentioned(trace)
    for old in sorted(named, reverse=True):
        for new in range(NULL_BLOCK + 1, old):
            if new in named:
                continue
            if time.monotonic() > deadline:
                return None
            candidate = [relabelled(a, old, new) for a in trace]
            found, ran = differs(candidate)
            if found is not None and len(ran) == len(trace):
                return ran, found
    return None


def _drop_and_simplify(
    differs: Replay, trace: list[Any], deadline: float
) -> tuple[list[Any], str] | None:
    """A shorter sequence showing the same kind of difference, found by dropping one action
    and simplifying another at once (a ``touch`` goes together with one block fewer in the
    ``free_blocks`` it made legal); ``None`` when there is none. Only for short sequences."""
    if len(trace) > MAX_PAIRED:
        return None
    for i in range(len(trace)):
        rest = [*trace[:i], *trace[i + 1 :]]
        # every block listed once, everywhere: a dropped touch made each double free illegal
        candidates = [[(once_each(a) or [a])[0] for a in rest]]
        candidates += [
            [*rest[:j], variant, *rest[j + 1 :]]
            for j, action in enumerate(rest)
            for variant in simpler(action)
        ]
        for candidate in candidates:
            if time.monotonic() > deadline:
                return None
            found, ran = differs(candidate)
            if found is not None and len(ran) < len(trace):
                return ran, found
    return None
