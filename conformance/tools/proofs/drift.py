"""The encoding run on concrete actions beside the executable spec: the drift check.

The proofs are about the Z3 encoding (:mod:`.encoding`, :mod:`.actions`), not about
``kvpool.spec``. What ties the two is this module: it gives every spec action its encoded
counterpart, evaluates that counterpart's precondition and state after on a concrete
encoded state, and reports what the encoding says in the spec's vocabulary, so that a test
can compare the two after every step (``tests/conformance/test_proofs_drift.py``).

The encoded transitions are the very functions the obligations prove things about
(``actions.get_new_blocks``, ``actions.free_blocks``, ...), called with concrete
arguments: a concrete state is a :class:`Values` whose Z3 view (:meth:`Values.state`)
answers with constants, and each field of the state after is folded back to a constant
with ``z3.simplify``. No solver is asked anything.

What the encoding leaves out, the translation supplies, and it is the whole of the
abstraction:

- **keys** are integers: a spec key (block hash + group id) gets the next id the first
  time it is seen (:class:`KeyIds`). The hash chain is not encoded: for
  ``cache_full_blocks`` the translation computes which blocks are cached (the window
  ``blocks[num_cached_blocks:num_full_blocks]``, less the null block and masked-out ones)
  and each one's key (the last fine hash inside the block, with the group id) and token
  count; for ``cache_partial_block`` the key at ``num_tokens``. It restates those rules
  itself rather than calling ``kvpool.spec``, so a drift in the spec's index arithmetic
  shows too.
- **argument shapes** the encoding's arguments cannot express (a group id that does not
  fit a key, a block size that is no multiple of the hash block size, a window out of the
  table, too few hashes, a block listed twice in one ``cache_full_blocks`` window, a
  block id outside the window out of range) are refused by the translation
  (:attr:`Outcome.shape` names the rule), never by the encoding.
- **the peer pool** is a second encoded state; foreign blocks are released on it with
  the same encoded ``free_blocks``; ``peer_get_new_blocks`` is ``get_new_blocks`` on it.
- **the free queue's order** is the encoded ``rank``; ``get_new_blocks`` hands out the
  free blocks of lowest rank (the encoding allows any subset of free blocks).
- **queries**: ``get_cached_block`` answers with blocks the encoded multimap lists under
  each group's key (``actions.cache_hit``; which duplicate is the earliest is not
  encoded); ``is_block_writable`` is ``actions.is_block_writable``; ``get_usage`` and
  ``get_num_free_blocks`` read the encoded free count. The queries' contract (a block id
  in range) is ``encoding.in_range``.
- **events and watcher names** are not encoded: ``take_events`` changes no encoded field,
  and a watcher is only "there or not".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import z3  # type: ignore[import-untyped]
from kvpool.spec.actions import (
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    GetNumFreeBlocks,
    GetUsage,
    IsBlockWritable,
    MoveBlockHashes,
    PeerGetNewBlocks,
    ResetPrefixCache,
    TakeEvents,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.config import PoolConfig
from kvpool.spec.keys import make_key
from kvpool.spec.profile import SEED, Profile

from . import actions as default_actions
from . import encoding as default_encoding
from .encoding import Expr, State

#: Rules the translation itself refuses with: argument shapes the encoding cannot express.
SHAPE_RULES = frozenset(
    {
        "group-id-range",
        "block-size-multiple",
        "cache-range",
        "hashes-available",
        "cache-distinct",
        "block-id-range",
        "partial-tokens",
    }
)


def _int(e: Any) -> int | None:
    """``e`` as a Python int if it is (or folds to) a constant."""
    if isinstance(e, int):
        return e
    if isinstance(e, z3.IntNumRef):
        return int(e.as_long())
    if not z3.is_int_value(e):
        e = z3.simplify(e)
    return int(e.as_long()) if z3.is_int_value(e) else None


def value(e: Any) -> Any:
    """A closed Z3 term folded to a Python bool or int."""
    e = z3.simplify(e)
    if z3.is_true(e):
        return True
    if z3.is_false(e):
        return False
    if z3.is_int_value(e):
        return int(e.as_long())
    raise ValueError(f"the encoding left a term that is not constant: {e}")


@dataclass(frozen=True)
class Values:
    """One encoded pool state, as constants at its blocks ``0..n-1`` and key ids
    ``1..keys``; every other index reads as empty (the arrays are total)."""

    n: int
    caching: bool
    ref: tuple[int, ...]
    free: tuple[bool, ...]
    nfree: int
    hasp: tuple[bool, ...]
    pkey: tuple[int, ...]
    ptok: tuple[int, ...]
    #: (block, key) pairs: ``key`` is an extra key of ``block``
    extra: frozenset[tuple[int, int]]
    #: (key, block) pairs: the multimap lists ``block`` under ``key``
    mm: frozenset[tuple[int, int]]
    wat: tuple[bool, ...]
    rank: tuple[int, ...]
    lo: int
    hi: int

    def queue(self) -> tuple[int, ...]:
        """The free blocks, lowest rank (front) first."""
        return tuple(sorted((b for b in range(self.n) if self.free[b]), key=self.rank.__getitem__))

    def state(self) -> State:
        """The Z3 view: constants at concrete indices, ``If`` chains at symbolic ones."""

        def block(values: tuple[Any, ...], default: Any) -> Callable[[Expr], Expr]:
            consts = [z3.BoolVal(v) if isinstance(v, bool) else z3.IntVal(v) for v in values]
            other = z3.BoolVal(default) if isinstance(default, bool) else z3.IntVal(default)

            def at(b: Expr) -> Expr:
                i = _int(b)
                if i is not None:
                    return consts[i] if 0 <= i < self.n else other
                out = other
                for j in reversed(range(self.n)):
                    out = z3.If(b == j, consts[j], out)
                return out

            return at

        def pairs(members: frozenset[tuple[int, int]]) -> Callable[[Expr, Expr], Expr]:
            def at(x: Expr, y: Expr) -> Expr:
                i, j = _int(x), _int(y)
                if i is not None and j is not None:
                    return z3.BoolVal((i, j) in members)
                return z3.Or(False, *(z3.And(x == p, y == q) for p, q in sorted(members)))

            return at

        return State(
            n=z3.IntVal(self.n),
            caching=z3.BoolVal(self.caching),
            ref=block(self.ref, 0),
            free=block(self.free, False),
            nfree=z3.IntVal(self.nfree),
            hasp=block(self.hasp, False),
            pkey=block(self.pkey, 0),
            ptok=block(self.ptok, 0),
            extra=pairs(self.extra),
            mm=pairs(self.mm),
            wat=block(self.wat, False),
            rank=block(self.rank, 0),
            lo=z3.IntVal(self.lo),
            hi=z3.IntVal(self.hi),
        )


def read(s: State, n: int, caching: bool, keys: int) -> Values:
    """The constants of an encoded state at blocks ``0..n-1`` and key ids ``1..keys``."""
    blocks = [z3.IntVal(b) for b in range(n)]
    key_ids = [z3.IntVal(k) for k in range(1, keys + 1)]

    def each(fn: Callable[[Expr], Expr]) -> tuple[Any, ...]:
        return tuple(value(fn(b)) for b in blocks)

    return Values(
        n=n,
        caching=caching,
        ref=each(s.ref),
        free=each(s.free),
        nfree=value(s.nfree),
        hasp=each(s.hasp),
        pkey=each(s.pkey),
        ptok=each(s.ptok),
        extra=frozenset(
            (b, k)
            for b in range(n)
            for k in range(1, keys + 1)
            if value(s.extra(blocks[b], key_ids[k - 1]))
        ),
        mm=frozenset(
            (k, b)
            for k in range(1, keys + 1)
            for b in range(n)
            if value(s.mm(key_ids[k - 1], blocks[b]))
        ),
        wat=each(s.wat),
        rank=each(s.rank),
        lo=value(s.lo),
        hi=value(s.hi),
    )


@dataclass
class KeyIds:
    """Spec keys (bytes) to the encoding's integer key ids, numbered as first seen."""

    ids: dict[bytes, int] = field(default_factory=dict)

    def __call__(self, key: bytes) -> int:
        return self.ids.setdefault(key, len(self.ids) + 1)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Outcome:
    """What the encoding says of one concrete action."""

    allowed: bool
    #: the shape rule the translation refused with (the encoding was not asked), if any
    shape: str | None = None
    #: the blocks handed out, in order (``get_new_blocks``, ``peer_get_new_blocks``)
    handed_out: tuple[int, ...] = ()
    #: the blocks whose reuse watcher fired
    fired: frozenset[int] = frozenset()
    #: a query's or reset's answer: bool, int, float or, for ``get_cached_block``, one
    #: set of possible blocks per group (``None``: a miss)
    answer: Any = None
    #: ``cache_partial_block``: the key id it registers
    key: int | None = None


@dataclass
class Encoded:
    """A pool (and its peer) as the encoding sees it, stepped by spec actions."""

    config: PoolConfig
    profile: Profile = SEED
    actions: ModuleType = default_actions
    encoding: ModuleType = default_encoding
    keys: KeyIds = field(default_factory=KeyIds)
    pool: Values = field(init=False)
    peer: Values | None = field(init=False)

    def __post_init__(self) -> None:
        self.pool = self._initial(self.config.num_gpu_blocks)
        self.peer = self._initial(self.config.peer_blocks) if self.config.peer_blocks else None

    def _initial(self, n: int) -> Values:
        caching = self.config.enable_caching
        s = self.encoding.initial_state(z3.IntVal(n), z3.BoolVal(caching))
        return read(s, n, caching, len(self.keys))

    # -- evaluating one encoded step -----------------------------------------------------

    def _allowed(self, values: Values, step: Any, ids: Iterable[int]) -> bool:
        """The step's precondition at every block of the pool and every listed id (out of
        range ones too), at every key id."""
        if not value(step.pre):
            return False
        blocks = sorted(set(range(values.n)) | set(ids))
        keys = range(len(self.keys) + 1)
        return all(value(step.pre_at(z3.IntVal(b), z3.IntVal(k))) for b in blocks for k in keys)

    def _after(self, values: Values, step: Any) -> Values:
        return read(step.post, values.n, values.caching, len(self.keys))

    def _free(self, values: Values, action: FreeBlocks, blocks: tuple[int, ...]) -> Any:
        args = [z3.IntVal(b) for b in blocks]
        return self.actions.free_blocks(
            values.state(),
            self.actions.counts_of(args),
            args=args,
            evict_first=action.evict_first,
            unkeyed_front=self.profile.unkeyed_free_to_front,
            caching_off_front=self.profile.caching_off_free_to_front,
        )

    def _get_new(self, values: Values, n: int) -> tuple[Any, tuple[int, ...]]:
        """``get_new_blocks(n)`` handing out the ``n`` free blocks of lowest rank."""
        taken = values.queue()[: max(n, 0)]
        return self.actions.get_new_blocks(
            values.state(), _member(frozenset(taken)), z3.IntVal(n)
        ), taken

    def apply(self, action: Action) -> Outcome:
        """Evaluate ``action``'s encoded counterpart; if allowed, move to the state after."""
        A, E = self.actions, self.encoding
        s = self.pool.state()
        if isinstance(action, GetNewBlocks):
            step, taken = self._get_new(self.pool, action.num_blocks)
            return self._commit(step, (), taken=taken)
        if isinstance(action, PeerGetNewBlocks):
            if self.peer is None:
                return Outcome(False)
            step, taken = self._get_new(self.peer, action.num_blocks)
            return self._commit(step, (), taken=taken, peer=True)
        if isinstance(action, FreeBlocks):
            step = self._free(self.pool, action, action.blocks)
            if not action.foreign:
                return self._commit(step, action.blocks)
            if self.peer is None:
                return Outcome(False)
            peer_step = self._free(self.peer, action, action.foreign)
            if not (
                self._allowed(self.peer, peer_step, action.foreign)
                and self._allowed(self.pool, step, action.blocks)
            ):
                return Outcome(False)
            self.peer = self._after(self.peer, peer_step)
            self.pool = self._after(self.pool, step)
            return Outcome(True)
        if isinstance(action, Touch):
            ids = action.blocks
            args = [z3.IntVal(b) for b in ids]
            return self._commit(A.touch(s, A.counts_of(args), None, args), ids)
        if isinstance(action, UnpinBlocks):
            ids = action.blocks
            args = [z3.IntVal(b) for b in ids]
            return self._commit(A.unpin_blocks(s, A.counts_of(args), None, args), ids)
        if isinstance(action, CacheFullBlocks):
            return self._cache_full(s, action)
        if isinstance(action, CachePartialBlock):
            return self._cache_partial(s, action)
        if isinstance(action, GetCachedBlock):
            return self._lookup(s, action)
        if isinstance(action, EvictBlocks):
            chosen = frozenset(action.block_ids)
            sel = _member(chosen)
            return self._commit(A.evict_blocks(s, sel), action.block_ids)
        if isinstance(action, MoveBlockHashes):
            step = A.move_block_hashes(s, z3.IntVal(action.src), z3.IntVal(action.dst))
            return self._commit(step, (action.src, action.dst))
        if isinstance(action, ResetPrefixCache):
            step, idle = A.reset_prefix_cache(s)
            fired = frozenset(b for b in range(self.pool.n) if self.pool.wat[b])
            done = value(idle)
            outcome = self._commit(step, ())
            return replace(outcome, answer=done, fired=fired if done else frozenset())
        if isinstance(action, IsBlockWritable):
            b = z3.IntVal(action.block)
            if not value(E.in_range(s, b)):
                return Outcome(False)
            return Outcome(True, answer=value(A.is_block_writable(s, b)))
        if isinstance(action, GetUsage):
            real = self.pool.n - 1
            return Outcome(True, answer=1.0 - self.pool.nfree / real if real else 0.0)
        if isinstance(action, GetNumFreeBlocks):
            return Outcome(True, answer=self.pool.nfree)
        if isinstance(action, TakeEvents):
            return Outcome(True)
        raise ValueError(f"no encoded counterpart for {action!r}")

    def _commit(
        self, step: Any, ids: Iterable[int], taken: tuple[int, ...] = (), peer: bool = False
    ) -> Outcome:
        """Move the pool (or the peer) to the state after ``step`` if its precondition
        holds; ``taken`` are the blocks it hands out, whose watchers fire."""
        values = self.peer if peer else self.pool
        assert values is not None
        if not self._allowed(values, step, ids):
            return Outcome(False)
        fired = frozenset(b for b in taken if values.wat[b])
        if peer:
            self.peer = self._after(values, step)
        else:
            self.pool = self._after(values, step)
        return Outcome(True, handed_out=taken, fired=fired)

    # -- the prefix cache: the translation computes blocks, keys and token counts ----------

    def _shape(self, block_size: int, groups: Iterable[int]) -> str | None:
        if any(not 0 <= g < 2**32 for g in groups):
            return "group-id-range"
        hbs = self.config.hash_block_size
        if block_size <= 0 or block_size % hbs:
            return "block-size-multiple"
        return None

    def _cache_full(self, s: State, action: CacheFullBlocks) -> Outcome:
        n, nc, nf = self.pool.n, action.num_cached_blocks, action.num_full_blocks
        table = action.blocks
        shape = self._shape(action.block_size, (action.group_id,))
        if shape is None and not 0 <= nc <= nf <= len(table):
            shape = "cache-range"
        mask = action.block_mask
        if shape is None and mask is not None and len(mask) != nf - nc:
            shape = "cache-range"
        scale = action.block_size // self.config.hash_block_size if shape is None else 1
        if shape is None and nc < nf and len(action.block_hashes) // scale < nf:
            shape = "hashes-available"
        window = [
            (i, table[i])
            for i in range(nc, nf)
            if shape is None and table[i] != 0 and (mask is None or mask[i - nc])
        ]
        chosen = {i for i, _ in window}
        if shape is None and any(not 0 <= b < n for i, b in enumerate(table) if i not in chosen):
            shape = "block-id-range"
        if shape is None and len({b for _, b in window}) < len(window):
            shape = "cache-distinct"
        if shape is not None:
            return Outcome(False, shape=shape)
        key = {
            b: self.keys(make_key(action.block_hashes[(i + 1) * scale - 1], action.group_id))
            for i, b in window
        }
        tokens = {b: (i + 1) * action.block_size for i, b in window}
        step = self.actions.cache_full_blocks(
            s, _member(frozenset(key)), _lookup_fn(key, 0), _lookup_fn(tokens, 0)
        )
        return self._commit(step, [b for _, b in window])

    def _cache_partial(self, s: State, action: CachePartialBlock) -> Outcome:
        b, hbs = action.block, self.config.hash_block_size
        real = 0 < b < self.pool.n
        shape = self._shape(action.block_size, (action.group_id,)) if real else None
        index = action.num_tokens // hbs - 1
        if shape is None and real and action.num_tokens > 0 and action.num_tokens % hbs:
            shape = "partial-tokens"
        if shape is None and real and index >= len(action.block_hashes):
            shape = "hashes-available"
        if shape is not None:
            return Outcome(False, shape=shape)
        key = 0  # no key: the null block, an id out of range, or no token (refused)
        if 0 <= index < len(action.block_hashes) and 0 <= action.group_id < 2**32:
            key = self.keys(make_key(action.block_hashes[index], action.group_id))
        step = self.actions.cache_partial_block(
            s,
            z3.IntVal(b),
            z3.IntVal(key),
            z3.IntVal(action.num_tokens),
            z3.BoolVal(action.replace_existing_hashes),
        )
        return replace(self._commit(step, (b,)), key=key if b != 0 else None)

    def _lookup(self, s: State, action: GetCachedBlock) -> Outcome:
        shape = self._shape(self.config.hash_block_size, action.group_ids)
        if shape is not None:
            return Outcome(False, shape=shape)
        hits = []
        for group in action.group_ids:
            k = self.keys.ids.get(make_key(action.block_hash, group))
            under = frozenset(
                b
                for b in range(self.pool.n)
                if k is not None and value(self.actions.cache_hit(s, z3.IntVal(k), z3.IntVal(b)))
            )
            if not under:
                return Outcome(True, answer=None)
            hits.append(under)
        return Outcome(True, answer=tuple(hits))


def _member(chosen: frozenset[int]) -> Callable[[Expr], Expr]:
    def sel(b: Expr) -> Expr:
        i = _int(b)
        if i is not None:
            return z3.BoolVal(i in chosen)
        return z3.Or(False, *(b == x for x in sorted(chosen)))

    return sel


def _lookup_fn(table: dict[int, int], default: int) -> Callable[[Expr], Expr]:
    def at(b: Expr) -> Expr:
        i = _int(b)
        if i is not None:
            return z3.IntVal(table.get(i, default))
        out = z3.IntVal(default)
        for x, v in sorted(table.items()):
            out = z3.If(b == x, v, out)
        return out

    return at
