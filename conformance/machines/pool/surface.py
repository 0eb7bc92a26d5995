"""The target's surface, checked before any test case is drawn, and what an exception
raised during a run says about whose fault it is.

A pool that lacks a method the suite will call, or takes other arguments than the suite
passes, is not a nonconforming pool: it is a target the suite cannot drive. That is a usage
error (exit 2), listed in one message before anything runs (:func:`surface_problems`); and
when a run still meets such a mismatch (an ``AttributeError`` or ``TypeError`` at the
suite's call into the pool), it stops with :class:`SurfaceMismatch`, never a finding.
Any other exception of the suite's own code is a bug in kvpool (exit 4).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from kvpool.spec import PoolConfig, Profile

from ...hooks import pool_target_problems
from . import operations as table
from .fault import fault_of
from .pool_call import keyword_parameter
from .target import TargetFactory

#: Where the docs say what each operation's call takes and returns.
OPERATION_PAGE = (
    "docs: Reference > Pool operations > {operation} (reference/actions/{operation}.md)"
)
TARGET_PAGE = "docs: Tutorial > Writing an adapter (tutorial/adapter.md)"

#: What a Target (the protocol of :mod:`.target`) must define.
TARGET_ATTRIBUTES = ("name", "operations", "observes")
TARGET_METHODS = ("apply", "view", "structure_problems")


class SurfaceMismatch(Exception):
    """The target does not offer what the suite calls: a usage error, not a finding."""


def surface_problems(factory: TargetFactory, profile: Profile, config: PoolConfig) -> list[str]:
    """Everything missing from the surface of the target ``factory`` builds for
    ``config``, each with what to do; ``[]`` when the suite can drive it."""
    try:
        target = factory(config, profile)
    except Exception as exc:  # the factory or the pool's constructor failed
        if fault_of(exc) != "mismatch":
            return [f"the target could not build a pool: {_text(exc)}"]
        pool = getattr(exc, "obj", None)  # the adapter read a pool that lacks something
        if pool is not None and callable(getattr(pool, "get_new_blocks", None)):
            from ...engines.vllm_api.detection import detect_api

            return _pool_problems(pool, detect_api(type(pool), pool), config)
        return [f"building the target failed at the suite's call: {_text(exc)}; {TARGET_PAGE}"]
    problems = _target_problems(target)
    if problems:
        return problems
    from ...engines.vllm_api.adapter import VllmApiTarget

    if isinstance(target, VllmApiTarget):
        return _pool_problems(target.pool, target.api, config)
    # a Target of its own is judged on the operations it declares (the pool machine draws
    # only those; the request machine says so when it lacks the ones it needs)
    return problems


def surface_message(name: str, problems: list[str]) -> str:
    """The one usage error listing everything the target lacks."""
    lines = "".join(f"\n  - {p}" for p in problems)
    return (
        f"target {name!r} does not offer what the chosen checks call (nothing was run; this "
        f"is not a finding):{lines}"
    )


def _target_problems(target: object) -> list[str]:
    """What a Target lacks of the protocol (name, operations, observes, apply, view,
    structure_problems)."""
    problems = []
    kind = type(target).__name__
    for name in TARGET_ATTRIBUTES:
        if not hasattr(target, name):
            problems.append(f"the Target {kind} has no attribute {name!r}; {TARGET_PAGE}")
    for name in TARGET_METHODS:
        if not callable(getattr(target, name, None)):
            problems.append(f"the Target {kind} has no method {name}(); {TARGET_PAGE}")
    problems += [f"{p}; {TARGET_PAGE}" for p in pool_target_problems(target)]
    return problems


def _pool_problems(pool: Any, api: Any, config: PoolConfig) -> list[str]:
    """What a pool with vLLM's BlockPool API (called as ``api`` says) lacks: the methods
    every run calls, calls its own signatures do not allow, the blocks list and its blocks'
    ids."""
    kind = type(pool).__name__
    problems = []
    for op in table.POOL_OPERATIONS:
        method = op.call.method
        if op.required and not callable(getattr(pool, method, None)):
            problems.append(
                f"the pool {kind} has no method {method}: add {op.required}; "
                + OPERATION_PAGE.format(operation=op.name)
            )
    for op in table.POOL_OPERATIONS:
        method, arguments = op.call.method, op.call.positional
        found = getattr(pool, method, None)
        if op.call.on_peer or not callable(found):
            continue
        keywords = (keyword_parameter(k, api) for k in op.call.keywords)
        problem = _call_problem(found, arguments, [k for k in keywords if k is not None])
        if problem is not None:
            problems.append(
                f"the pool {kind}'s {method} cannot be called as {method}"
                f"({', '.join(arguments)}): {problem}; give it those parameters, or drive the "
                "pool your way with a Target of your own (a factory taking (config, profile)); "
                + OPERATION_PAGE.format(operation=method)
            )
    problems += _block_problems(pool, kind, config)
    return problems


def _call_problem(method: Any, arguments: tuple[str, ...], keywords: Iterable[str]) -> str | None:
    """Why ``method`` cannot be called with ``arguments`` (by position) and ``keywords``,
    or ``None`` (also when its signature cannot be read)."""
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(*arguments, **dict.fromkeys(keywords))
    except TypeError as exc:
        return f"its signature is {method.__name__}{signature}, and {exc}"
    return None


def _block_problems(pool: Any, kind: str, config: PoolConfig) -> list[str]:
    """The pool's ``blocks``: one per id, each with its ``block_id``."""
    blocks = getattr(pool, "blocks", None)
    where = OPERATION_PAGE.format(operation="get_new_blocks")
    try:
        count = len(blocks)  # type: ignore[arg-type]
        listed = [blocks[i] for i in range(count)]  # type: ignore[index]
    except Exception:  # no list at all, or one that cannot be read by index
        return [
            f"the pool {kind} has no blocks list: add blocks, the pool's blocks indexed by "
            f"id (blocks[i].block_id == i); {where}"
        ]
    problems = []
    if count != config.num_gpu_blocks:
        problems.append(
            f"the pool {kind}'s blocks list has {count} blocks, built with num_gpu_blocks="
            f"{config.num_gpu_blocks}: it must hold every block, the null block 0 included"
        )
    wrong = [i for i, b in enumerate(listed) if getattr(b, "block_id", None) != i]
    if wrong:
        problems.append(
            f"the pool {kind}'s blocks {wrong} have no block_id equal to their place in "
            f"blocks (the suite names blocks by that id); {where}"
        )
    return problems


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
