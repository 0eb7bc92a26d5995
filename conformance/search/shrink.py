"""Shrinking a failing action sequence by replaying it.

Actions are data and a replay takes milliseconds, so the shrinker works on the actions
themselves: drop chunks of actions (halves, then quarters, ... then single ones), then
drop single entries from an action's block lists, keeping every change after which the
target still fails. An action that a removal made meaningless (now outside the contract,
at the ``safety`` and ``order`` levels) is dropped as well.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from typing import Any, TypeVar

from kvpool.spec import Action, PoolConfig, Profile

from ..machines.pool.levels import Level
from ..machines.pool.lockstep import replay
from ..machines.pool.signature import signature
from ..machines.pool.target import TargetFactory

C = TypeVar("C")


#: Replays a candidate sequence on one configuration: the failure (or ``None``) and the
#: actions actually run (out-of-contract ones are skipped).
Replay = Callable[[list[Any]], tuple[str | None, list[Any]]]
#: A pass tried once the others shrink nothing more: given the replay (which counts only a
#: failure of the kind being shrunk), the sequence and the deadline, another failing
#: sequence to go on from (shorter, or naming lower blocks) and its message, or ``None``.
Rewrite = Callable[[Replay, list[Any], float], tuple[list[Any], str] | None]


def shrink(
    factory: TargetFactory,
    profile: Profile,
    level: Level,
    config: PoolConfig,
    actions: tuple[Action, ...],
    budget_seconds: float = 20.0,
) -> tuple[PoolConfig, tuple[Action, ...], str]:
    """The smallest failing pool and shortest failing sequence found within the budget, and
    the failure message."""

    def replay_on(pool: PoolConfig, skip: bool) -> Replay:
        def fails(candidate: list[Any]) -> tuple[str | None, list[Any]]:
            return replay(factory, profile, level, pool, candidate, skip_out_of_contract=skip)

        return fails

    return shrink_sequence(replay_on, _smaller_pools, _simpler, config, actions, budget_seconds)


def shrink_sequence(
    replay_on: Callable[[C, bool], Replay],
    smaller: Callable[[C], list[C]],
    simpler: Callable[[Any], list[Any]],
    config: C,
    actions: tuple[Any, ...],
    budget_seconds: float,
    rewrites: Sequence[Rewrite] = (),
) -> tuple[C, tuple[Any, ...], str]:
    """Shrink any failing sequence: drop chunks of actions, simplify single actions, try
    smaller configurations, then the ``rewrites`` in order, until nothing changes or the
    budget is spent. The one shrinker of every machine and of ``kvpool diff``.

    ``replay_on(config, skip)`` replays on ``config``, skipping out-of-contract actions when
    ``skip`` is set.
    """
    deadline = time.monotonic() + budget_seconds
    found, best = replay_on(config, True)(list(actions))
    if found is None:  # not reproducible by replay: keep what Hypothesis found
        found, best = replay_on(config, False)(list(actions))
        return config, tuple(best), found or "the failure did not reproduce on replay"
    message = found
    replay_on = _keeping(replay_on, signature(message))
    while time.monotonic() < deadline:
        previous = (config, best)
        fails = replay_on(config, True)
        best, message = _drop_chunks(fails, best, message, deadline)
        best, message = _simplify_actions(fails, simpler, best, message, deadline)
        best, message = _drop_pairs(fails, best, message, deadline)
        for candidate in smaller(config):
            found, ran = replay_on(candidate, True)(best)
            if found is not None and len(ran) <= len(best):
                config, best, message = candidate, ran, found
                break
        if (config, best) == previous:
            fails = replay_on(config, True)
            tried = (rewrite(fails, best, deadline) for rewrite in rewrites)
            rewritten = next((r for r in tried if r is not None), None)
            if rewritten is None:
                break
            best, message = rewritten
    return config, tuple(best), message


def _keeping(replay_on: Callable[[C, bool], Replay], kind: str) -> Callable[[C, bool], Replay]:
    """Replays that count a failure only when it is the same kind (:func:`signature`):
    shrinking must not swap one finding for another that is easier to reach."""

    def on(config: C, skip: bool) -> Replay:
        fails = replay_on(config, skip)

        def same(candidate: list[Any]) -> tuple[str | None, list[Any]]:
            found, ran = fails(candidate)
            if found is not None and signature(found) != kind:
                return None, ran
            return found, ran

        return same

    return on


def _smaller_pools(config: PoolConfig) -> list[PoolConfig]:
    """Simpler pools to try the same actions on: no peer, fewer blocks."""
    pools = [replace(config, peer_blocks=0)] if config.peer_blocks else []
    pools += [replace(config, num_gpu_blocks=n) for n in range(2, config.num_gpu_blocks)]
    return pools


def _drop_chunks(
    fails: Replay, best: list[Any], message: str, deadline: float
) -> tuple[list[Any], str]:
    """Remove runs of actions, largest first, while the target still fails."""
    chunk = max(1, len(best) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        i = 0
        changed = False
        while i < len(best) and time.monotonic() < deadline:
            found, ran = fails(best[:i] + best[i + chunk :])
            if found is not None:
                best, message, changed = ran, found, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return best, message


def _drop_pairs(
    fails: Replay, best: list[Any], message: str, deadline: float
) -> tuple[list[Any], str]:
    """Remove two actions at once: one may only be removable together with another (a
    touch and the free it enables). Only for short sequences, where it is cheap."""
    if len(best) > 24:
        return best, message
    i = 0
    while i < len(best) and time.monotonic() < deadline:
        for j in range(i + 1, len(best)):
            found, ran = fails(best[:i] + best[i + 1 : j] + best[j + 1 :])
            if found is not None and len(ran) < len(best):
                best, message = ran, found
                break
        else:
            i += 1
    return best, message


def _simplify_actions(
    fails: Replay,
    simpler: Callable[[Any], list[Any]],
    best: list[Any],
    message: str,
    deadline: float,
) -> tuple[list[Any], str]:
    """Remove single entries from actions' block lists while the target still fails."""
    i = 0
    while i < len(best) and time.monotonic() < deadline:
        for smaller in simpler(best[i]):
            found, ran = fails([*best[:i], smaller, *best[i + 1 :]])
            if found is not None and len(ran) <= len(best):
                best, message = ran, found
                break
        else:
            i += 1
    return best, message


def _simpler(action: Any) -> list[Any]:
    """Variants of ``action`` that ask for less: one entry fewer in a block list, one block
    named by a lower id (so that the allocations before it can shrink too), one hash fewer
    at the end of a request's hashes, one block fewer from ``get_new_blocks``."""
    variants = []
    for f in fields(action):
        value = getattr(action, f.name)
        if f.name in ("blocks", "foreign", "block_ids", "group_ids") and isinstance(value, tuple):
            for j in range(len(value)):
                variants.append(replace(action, **{f.name: value[:j] + value[j + 1 :]}))
            if f.name in ("blocks", "block_ids"):
                for j, block in enumerate(value):
                    lower = [b for b in range(1, block) if b not in value]
                    variants += [
                        replace(action, **{f.name: (*value[:j], b, *value[j + 1 :])}) for b in lower
                    ]
        if f.name == "block_hashes" and value:
            variants.append(replace(action, block_hashes=value[:-1]))
        if f.name == "num_blocks" and isinstance(value, int) and value > 0:
            variants.append(replace(action, num_blocks=value - 1))
    return variants
