"""Walking a pool's doubly linked free list without trusting it.

Every walk is capped at N+2 steps, so a corrupted list (a cycle, a dangling link) is
reported at once instead of hanging the suite.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

HEAD_NAMES = ("fake_free_list_head", "head", "_head")
TAIL_NAMES = ("fake_free_list_tail", "tail", "_tail")


ROOT_NAMES = ("_root", "root")


#: The attribute names each queue class keeps its sentinels under, once found: a view
#: walks the list after every step, and looking the names up was a third of the walk.
_FOUND: dict[type, tuple[str, str]] = {}


def sentinels(queue: Any) -> tuple[Any, Any] | None:
    """The head and tail sentinels of ``queue``, if it has them under a known name.

    A circular list with one root sentinel (as ours) is its own head and tail.
    """
    names = _FOUND.get(type(queue))
    if names is not None:
        head = getattr(queue, names[0], None)
        tail = getattr(queue, names[1], None)
        if head is not None and tail is not None:
            return head, tail
    root_name = next((n for n in ROOT_NAMES if hasattr(queue, n)), None)
    if root_name is not None and getattr(queue, root_name) is not None:
        _FOUND[type(queue)] = (root_name, root_name)
        root = getattr(queue, root_name)
        return root, root
    head_name = next((n for n in HEAD_NAMES if hasattr(queue, n)), None)
    tail_name = next((n for n in TAIL_NAMES if hasattr(queue, n)), None)
    if head_name is None or tail_name is None:
        return None
    head, tail = getattr(queue, head_name), getattr(queue, tail_name)
    if head is None or tail is None:
        return None
    _FOUND[type(queue)] = (head_name, tail_name)
    return head, tail


def walk(start: Any, stop: Any, link: str, cap: int) -> tuple[list[int], str | None]:
    """Block ids from ``start`` along ``link`` (``next_free_block`` or ``prev_free_block``)
    until ``stop``; a problem if it never gets there. (The link is read by an
    ``attrgetter``, not by ``getattr`` with its name: a view walks the free list after
    every step.)"""
    follow = _LINKS[link]
    ids: list[int] = []
    node = follow(start)
    while node is not stop:
        if node is None or len(ids) >= cap:
            return ids, _stuck(ids, link, cap, node)
        ids.append(node.block_id)
        node = follow(node)
    return ids, None


_LINKS = {name: attrgetter(name) for name in ("next_free_block", "prev_free_block")}


def _stuck(ids: list[int], link: str, cap: int, node: Any) -> str:
    """Why a walk along ``link`` stopped before its end, ``ids`` walked so far."""
    if node is None:
        after = f"block {ids[-1]}" if ids else "the sentinel"
        return f"the {link} link after {after} is None before reaching the end"
    return f"walking {link} did not end within {cap} blocks (a cycle?)"


def free_list_order(queue: Any, num_blocks: int) -> list[int] | None:
    """The free list front to back by a capped forward walk (``None`` if unreadable)."""
    ends = sentinels(queue)
    if ends is None:
        return None
    ids, problem = walk(ends[0], ends[1], "next_free_block", num_blocks + 2)
    return None if problem else ids


def free_list_problems(queue: Any, blocks: list[Any]) -> list[str]:
    """Everything wrong with the linked structure of ``queue`` over ``blocks``."""
    ends = sentinels(queue)
    if ends is None:
        return []
    head, tail = ends
    cap = len(blocks) + 2
    forward, problem_f = walk(head, tail, "next_free_block", cap)
    backward, problem_b = walk(tail, head, "prev_free_block", cap)
    problems = [p for p in (problem_f, problem_b) if p]
    if problems:
        return problems
    if forward != backward[::-1]:
        problems.append(f"forward walk {forward} and backward walk {backward[::-1]} disagree")
    if len(set(forward)) != len(forward):
        problems.append(f"the free list holds a block twice: {forward}")
    count = getattr(queue, "num_free_blocks", len(forward))
    if count != len(forward):
        problems.append(f"num_free_blocks is {count} but the list holds {len(forward)} blocks")
    listed = set(forward)
    for block in blocks:
        if (
            block.prev_free_block is not None or block.next_free_block is not None
        ) and block.block_id not in listed:
            problems.append(f"block {block.block_id} is not in the free list but keeps links")
    return problems
