"""A profile field's value, and the change between two profiles' values, as the pages show
them: the same text in every build.

A set-valued field (``key_attributes``) is shown as its members in sorted order, and a
change to it as the members added and removed, never as a ``frozenset`` repr, whose order
follows the process's string hashes (``PYTHONHASHSEED``) and hides which member changed.
"""

from __future__ import annotations

from .markdown import code


def shown(value: object) -> str:
    """``value`` as inline code: a set as its members sorted in braces, each its own inline
    code (so a table can wrap between them); anything else its repr."""
    if isinstance(value, (set, frozenset)):
        members = sorted(repr(member) for member in value)
        return "{" + ", ".join(code(m) for m in members) + "}" if members else code("{}")
    return code(repr(value))


def change(before: object, after: object) -> str:
    """How a field went from ``before`` to ``after``: ``adds `a`; removes `b``` for sets,
    ``a becomes b`` otherwise (the caller compares the values first)."""
    if isinstance(before, (set, frozenset)) and isinstance(after, (set, frozenset)):
        added = sorted(repr(member) for member in after - before)
        removed = sorted(repr(member) for member in before - after)
        parts = []
        if added:
            parts.append("adds " + ", ".join(code(m) for m in added))
        if removed:
            parts.append("removes " + ", ".join(code(m) for m in removed))
        return "; ".join(parts)
    return f"{shown(before)} becomes {shown(after)}"
