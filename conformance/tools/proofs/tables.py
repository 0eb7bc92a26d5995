"""Request block tables over an unbounded length: an array of block ids and a length.

A running request's table changes only by ``append`` (new blocks after the old ones, from
``Append``/``Admit``), by ``compute`` (the copy-on-write running path keeps the table and
moves the cache entries instead), and, in a sliding-window group, by ``slide`` (entries
that left the window become the null block). These are the table effects of
``kvpool.spec.manager``'s request actions on a running request, abstracted from block
choice: which blocks are appended is left free.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3  # type: ignore[import-untyped]

from .encoding import NULL, Expr


@dataclass(frozen=True)
class Table:
    """A block table: ``at(i)`` for ``0 <= i < length``."""

    entries: Expr  # Array Int -> Int
    length: Expr

    def at(self, i: Expr) -> Expr:
        return self.entries[i]


def fresh_table(tag: str) -> Table:
    return Table(z3.Array(f"{tag}.table", z3.IntSort(), z3.IntSort()), z3.Int(f"{tag}.len"))


def append(t: Table, new: Expr, count: Expr) -> Table:
    """``t`` followed by ``count`` blocks of ``new`` (an array from 0)."""
    i = z3.Int("i")
    return Table(z3.Lambda([i], z3.If(i < t.length, t.at(i), new[i - t.length])), t.length + count)


def keep(t: Table) -> Table:
    """``compute`` on a running request: the table keeps every entry (copy-on-write moves
    the keys to the copy, ``move_block_hashes``, rather than replacing the entry)."""
    return t


def cow_replacing_entry(t: Table, dst: Expr) -> Table:
    """The faulty copy-on-write: the written entry (the last) is replaced by the copy."""
    i = z3.Int("i")
    return Table(z3.Lambda([i], z3.If(i == t.length - 1, dst, t.at(i))), t.length)


def slide(t: Table, cutoff: Expr) -> Table:
    """A sliding-window group: entries before ``cutoff`` become the null block."""
    i = z3.Int("i")
    return Table(z3.Lambda([i], z3.If(i < cutoff, NULL, t.at(i))), t.length)


def slide_dropping(t: Table, cutoff: Expr) -> Table:
    """The faulty slide: entries before ``cutoff`` are dropped, shifting the rest."""
    i = z3.Int("i")
    return Table(z3.Lambda([i], t.at(i + cutoff)), t.length - cutoff)


def prefix_at(old: Table, new: Table, i: Expr) -> Expr:
    """Append-only, at entry ``i``: ``new`` is no shorter and keeps entry ``i``."""
    return z3.And(
        new.length >= old.length, z3.Implies(z3.And(i >= 0, i < old.length), new.at(i) == old.at(i))
    )


def prefix_up_to_null_at(old: Table, new: Table, i: Expr, faulty: bool = False) -> Expr:
    """Append-only up to null, at entry ``i``: ``new`` keeps entry ``i`` or nulls it.
    ``faulty`` also lets a null entry become any block (the NullRefill fault)."""
    same = z3.Or(new.at(i) == old.at(i), new.at(i) == NULL)
    if faulty:
        same = z3.Or(same, old.at(i) == NULL)
    return z3.And(new.length >= old.length, z3.Implies(z3.And(i >= 0, i < old.length), same))
