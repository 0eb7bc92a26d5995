"""Checking the request-level properties on what a run under test shows.

The run reports each step here: what a request was given (its tables), every copy and
write the engine makes, and the pool's view. Each property of
:data:`kvpool.spec.manager.properties.PROPERTIES` is evaluated where it applies and counted,
so a report can say which properties a run actually checked, and how often.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kvpool.spec.manager import (
    ALL_ATTRIBUTES,
    NO_EXTRA,
    BlockData,
    Broken,
    ExtraKeys,
    Scheduled,
    Signature,
    Tables,
)
from kvpool.spec.manager import properties as props
from kvpool.spec.manager.compute import write
from kvpool.spec.manager.extra_keys import differing, partitioned_block_hashes
from kvpool.spec.manager.lookup import needs

from ..pool.lockstep import Nonconformance
from ..pool.target import PoolView
from .capabilities import Capabilities
from .target import RequestSetup


class PropertyBroken(Nonconformance):
    """A request-level property does not hold; ``broken`` says which, where and how."""

    def __init__(self, broken: list[Broken]) -> None:
        self.broken = broken
        super().__init__("; ".join(str(b) for b in broken))


@dataclass
class Tracked:
    """A live request as the run under test has shown it."""

    tokens: tuple[int, ...]
    salt: str | None
    #: The attributes the profile partitions by, for :meth:`hashes`.
    partitions: frozenset[str] = ALL_ATTRIBUTES
    extra: ExtraKeys = NO_EXTRA
    tables: Tables = ()
    num_computed_tokens: int = 0
    running: bool = False
    #: At preemption: the group and table position of each block it had cached (leading
    #: full blocks, null entries left out), the block and its key.
    left: list[tuple[int, int, int, bytes]] = field(default_factory=list)

    def hashes(self, hash_block_size: int) -> tuple[bytes, ...]:
        return partitioned_block_hashes(
            self.tokens, hash_block_size, self.salt, self.extra, self.partitions
        )

    @property
    def signature(self) -> Signature:
        return Signature(self.tokens, self.salt, self.extra)


class RequestChecks:
    """The properties, evaluated on one run's observations."""

    def __init__(
        self,
        setup: RequestSetup,
        checked: Counter[str],
        partitions: frozenset[str] = ALL_ATTRIBUTES,
    ) -> None:
        self.setup = setup
        #: The attributes the profile says the manager's block hashes carry.
        self.partitions = partitions
        #: Per block, the request whose tokens the engine last wrote into it (its
        #: signature then): what a request hitting the block reads.
        self.origin: dict[int, Signature] = {}
        #: For a manager that keys a block when it schedules it: per block, its key and the
        #: first request whose table held it under that key (its signature then): whom a
        #: later hit on the block shares with, from the moment of keying.
        self.keyed_by: dict[int, tuple[bytes, Signature]] = {}
        self.bs = setup.manager.block_size
        self.hbs = setup.pool.hash_block_size
        self.caching = setup.pool.enable_caching
        self.checked = checked
        self.requests: dict[str, Tracked] = {}
        #: The engine's KV data per block (the pool run reads the spec manager's instead).
        self.contents: dict[int, BlockData] = {}
        #: What the manager declares that changes how it is judged.
        self.declared = Capabilities()
        #: The profile's ``scheduled_keys_within_pass``, for such a manager: a block keyed
        #: when its request was scheduled and not yet written (``pending``: block -> its key
        #: and that request) may be read by another request of the same forward pass, which
        #: writes it; once its request leaves without writing it, a key still on it is
        #: stale (``stale``: block -> key and request, for the message of a later hit).
        self.keys_within_pass = False
        self.pending: dict[int, tuple[bytes, str]] = {}
        self.stale: dict[int, tuple[bytes, str]] = {}

    # --- helpers ------------------------------------------------------------------------

    def _count(self, name: str) -> None:
        self.checked[name] += 1

    @staticmethod
    def _raise(broken: list[Broken]) -> None:
        if broken:
            raise PropertyBroken(broken)

    def _keys_of(self, view: PoolView) -> Callable[[int], frozenset[bytes]] | None:
        keys = view.keys
        if keys is None:
            return None
        return lambda b: keys[b] if 0 <= b < len(keys) else frozenset()

    # --- the engine's copies and writes -------------------------------------------------

    def guard(
        self, request_id: str, block: int, says_writable: bool, view: PoolView, what: str
    ) -> None:
        """``write-guard`` for one copy or write into ``block``: the pool's own
        ``is_block_writable`` and, where they show, its ref count and keys must allow it;
        a forward pass writing a block keyed for it at scheduling (``pending_for``) may,
        whoever of the same pass holds it too."""
        self._count("write-guard")
        broken: list[Broken] = []
        own_pass = self.pending_for(block) == request_id
        if view.ref_cnt is not None and view.keys is not None and 0 <= block < len(view.ref_cnt):
            keys = frozenset() if self.declared.registers_when_scheduled else view.keys[block]
            # the readers of the same pass hold it too: this pass writes it for them all
            holders = 1 if own_pass else view.ref_cnt[block]
            broken = props.write_guard(request_id, block, holders, keys, what)
        if not broken and not says_writable and not own_pass:
            broken = [
                Broken(
                    "write-guard",
                    f"{what} into block {block}, which the pool says is not writable",
                    request_id,
                    block,
                )
            ]
        self._raise(broken)

    def copy(self, src: int, dst: int) -> None:
        """The engine copied ``src``'s data into ``dst``."""
        self.contents[dst] = self.contents.get(src, BlockData(None, ()))
        if src in self.origin:
            self.origin[dst] = self.origin[src]
        else:
            self.origin.pop(dst, None)

    def write(self, request_id: str, block: int, index: int) -> None:
        """The engine wrote the request's pending tokens that fall in table entry ``index``."""
        r = self.requests[request_id]
        start = max(r.num_computed_tokens, index * self.bs)
        end = min(len(r.tokens), (index + 1) * self.bs)
        self.contents[block] = write(
            self.contents.get(block), r.salt, start - index * self.bs, r.tokens[start:end]
        )
        self.origin[block] = r.signature
        self.stale.pop(block, None)

    # --- after each request action ------------------------------------------------------

    def admitted(
        self,
        request_id: str,
        tokens: tuple[int, ...],
        salt: str | None,
        extra: ExtraKeys = NO_EXTRA,
    ) -> None:
        self.requests[request_id] = Tracked(tokens, salt, self.partitions, extra)

    def cached_prefix(self, request_id: str, view: PoolView) -> int | None:
        """Before a new request's admission: how many leading blocks of its prefix the
        cache holds under its own keys in every group, each left by a request agreeing
        with it in the tokens and every attribute (the ``keys-shared`` promise). A block
        counts once written by such a request, or, for a manager that keys blocks when it
        schedules them, once such a request's table held it under its key: sharing is
        promised from the moment of keying. ``None`` where it promises nothing (keys not
        shown, caching off, a sliding window)."""
        keys_of = self._keys_of(view)
        config = self.setup.manager
        if keys_of is None or not self.caching or config.has_sliding_window:
            return None
        r = self.requests[request_id]
        hashes = r.hashes(self.hbs)
        keyed: dict[bytes, list[int]] = {}
        for b in range(1, len(view.keys or ())):
            for key in keys_of(b):
                keyed.setdefault(key, []).append(b)
        me = r.signature
        length = 0
        while (length + 1) * self.bs <= len(r.tokens):
            end = (length + 1) * self.bs
            for g in range(len(config.groups)):
                key = props.expected_key(hashes, self.hbs, self.bs, length, g)
                agreeing = [
                    b
                    for b in keyed.get(key, [])
                    if (left := self._left_by(b, key)) is not None
                    and not differing(me, left, end, self.hbs)
                ]
                if not agreeing:
                    return length
            length += 1
        return length

    def _left_by(self, block: int, key: bytes) -> Signature | None:
        """Who left ``block`` under ``key``: the writer of its data, or, for a manager
        keying when it schedules, the request it was keyed for."""
        if not self.declared.registers_when_scheduled:
            return self.origin.get(block)
        found = self.keyed_by.get(block)
        return found[1] if found is not None and found[0] == key else None

    def _note_keyed(self, r: Tracked, view: PoolView) -> None:
        """For a manager keying blocks when it schedules them: each block of ``r``'s
        tables carrying ``r``'s key for its entry was keyed for ``r``."""
        keys_of = self._keys_of(view)
        if not self.declared.registers_when_scheduled or keys_of is None:
            return
        hashes = r.hashes(self.hbs)
        full = len(r.tokens) // self.bs
        for g, table in enumerate(r.tables):
            for i, b in enumerate(table[:full]):
                key = props.expected_key(hashes, self.hbs, self.bs, i, g)
                if b and key in keys_of(b) and self.keyed_by.get(b, (None,))[0] != key:
                    self.keyed_by[b] = (key, r.signature)

    def appended(self, request_id: str, tokens: tuple[int, ...]) -> None:
        r = self.requests[request_id]
        r.tokens = r.tokens + tokens

    def kept_blocks(self, request_id: str, view: PoolView) -> int | None:
        """Before a resume: the longest prefix, in blocks, that the blocks it left cached
        can serve on their own (every group's needed block among them, a sliding window
        only needing its last blocks); ``None`` when unknown or when one of them lost its
        key since (the property then promises nothing)."""
        keys_of = self._keys_of(view)
        if keys_of is None:
            return None
        request = self.requests[request_id]
        have = set()
        for group, index, block, key in request.left:
            if key not in keys_of(block):
                return None
            have.add((group, index))
        config = self.setup.manager
        top = min((len(request.tokens) - 1) // self.bs, 1 + max((i for _, i in have), default=-1))
        for length in range(top, 0, -1):
            if all(
                (g, i) in have
                for g in range(len(config.groups))
                for i in range(length)
                if needs(config, g, i, length)
            ):
                return length
        return 0

    def _swapped(self, r: Tracked, result: Scheduled, view: PoolView) -> Tables:
        """``r``'s tables with each full entry that ``result`` replaced by a block carrying
        the request's key for that entry taken as already replaced."""
        keys_of = self._keys_of(view)
        if keys_of is None:
            return r.tables
        hashes = r.hashes(self.hbs)
        full = len(r.tokens) // self.bs
        tables = []
        for g, (old, new) in enumerate(zip(r.tables, result.tables, strict=False)):
            entries = list(old)
            for i in range(min(len(old), len(new), full)):
                key = props.expected_key(hashes, self.hbs, self.bs, i, g)
                if old[i] != new[i] and key in keys_of(new[i]):
                    entries[i] = new[i]
            tables.append(tuple(entries))
        return (*tables, *r.tables[len(tables) :])

    def scheduled(
        self,
        request_id: str,
        result: Scheduled,
        view: PoolView,
        fresh: bool,
        contents: Mapping[int, BlockData] | None = None,
        kept: int | None = None,
        cached: int | None = None,
    ) -> None:
        """A request was (re)scheduled, grown or computed and shows ``result``."""
        r = self.requests[request_id]
        groups = self.setup.manager.groups
        broken: list[Broken] = []
        if not fresh:
            self._count("append-only")
            if any(g.is_sliding for g in groups):
                self._count("append-only-up-to-null")
            before = self._swapped(r, result, view) if self.declared.swaps_in_cached else r.tables
            broken += props.table_growth(request_id, groups, before, result.tables)
        r.tables, r.num_computed_tokens, r.running = result.tables, result.num_computed_tokens, True
        self._note_keyed(r, view)
        self._note_pending(request_id, r, view)
        keys_of = self._keys_of(view)
        if self.caching and keys_of is not None:
            self._count("hit-keys")
            keyed = r.num_computed_tokens
            if self.declared.keyed_tokens is not None:
                keyed = min(keyed, self.declared.keyed_tokens(request_id))
            broken += props.hit_keys(
                request_id,
                r.tables,
                keyed,
                r.hashes(self.hbs),
                self.hbs,
                self.bs,
                keys_of,
            )
        self._count("own-contents")
        read = props.own_contents(
            request_id,
            r.tables,
            r.num_computed_tokens,
            r.tokens,
            r.salt,
            self.bs,
            self.contents if contents is None else contents,
        )
        broken += [self._staleness(b) for b in read if not self._in_pass(b, request_id)]
        if fresh:
            self._count("computes-last-token")
            broken += props.computes_last_token(request_id, r.num_computed_tokens, len(r.tokens))
            self._count("keys-partitioned")
            broken += props.keys_partitioned(
                request_id,
                r.tables,
                r.num_computed_tokens,
                r.signature,
                self._writer,
                self.bs,
                self.hbs,
                self.partitions,
            )
        if cached is not None:
            self._count("keys-shared")
            broken += props.keys_shared(
                request_id, r.num_computed_tokens, cached, len(r.tokens), self.bs
            )
        if kept is not None:
            self._count("resume-finds-prefix")
            broken += props.resume_prefix(
                request_id, kept, r.num_computed_tokens, len(r.tokens), self.bs
            )
        self._raise(broken)

    # --- keys registered at scheduling, within one forward pass --------------------------

    def pending_for(self, block: int) -> str | None:
        """The request whose forward pass is still to write ``block``, keyed when that
        request was scheduled (``None``: no such pass is open, or the knob is off)."""
        found = self.pending.get(block) if self.keys_within_pass else None
        return None if found is None else found[1]

    def _note_pending(self, request_id: str, r: Tracked, view: PoolView) -> None:
        """The blocks of ``r``'s tables keyed for ``r`` beyond what it has computed: its
        forward pass is still to write them. A block already pending for another request
        stays that request's: it keyed the block first, so a later request of the same pass
        with the block in its table reads it, and writing it too makes it a second writer."""
        keys_of = self._keys_of(view)
        scheduled = self.keys_within_pass and self.declared.registers_when_scheduled
        if not scheduled or keys_of is None:
            return
        self.pending = {b: kr for b, kr in self.pending.items() if kr[1] != request_id}
        hashes = r.hashes(self.hbs)
        full = len(r.tokens) // self.bs
        for g, table in enumerate(r.tables):
            for i, b in enumerate(table[:full]):
                key = props.expected_key(hashes, self.hbs, self.bs, i, g)
                owner = self.pending.get(b)
                if owner is not None and owner[1] != request_id:
                    continue
                if b and (i + 1) * self.bs > r.num_computed_tokens and key in keys_of(b):
                    self.pending[b] = (key, request_id)
                    self.stale.pop(b, None)

    def _in_pass(self, broken: Broken, reader: str) -> bool:
        """Whether ``broken`` (an ``own-contents`` of ``reader``) is a read of a block that
        another request's open forward pass writes: the same pass, not judged yet."""
        keyer = None if broken.block is None else self.pending_for(broken.block)
        return keyer is not None and keyer != reader

    def _writer(self, block: int) -> Signature | None:
        """Who wrote ``block`` (for ``keys-partitioned``), or will in an open pass."""
        keyer = self.pending_for(block)
        if keyer is not None and keyer in self.requests:
            return self.requests[keyer].signature
        return self.origin.get(block)

    def _staleness(self, broken: Broken) -> Broken:
        """``broken``, saying so when its block carries a key whose pass ended unwritten."""
        found = None if broken.block is None else self.stale.get(broken.block)
        if found is None:
            return broken
        detail = (
            f"{broken.detail}: a stale key, registered when request {found[1]!r} was "
            "scheduled, kept after it left before its forward pass wrote the block"
        )
        return Broken(broken.property, detail, broken.request_id, broken.block)

    def strands_a_pass(self, request_id: str) -> bool:
        """Whether ``request_id`` leaving now would end a forward pass that another live
        request already reads from: a block keyed for it, not written, in another's table
        (the design runs such requests in one pass: the scheduler never splits them)."""
        mine = {b for b, (_, rid) in self.pending.items() if rid == request_id}
        if not self.keys_within_pass or not mine:
            return False
        return any(
            b in mine
            for rid, other in self.requests.items()
            if rid != request_id and other.running
            for table in other.tables
            for b in table
        )

    def _end_pass(self, request_id: str, view: PoolView) -> None:
        """``request_id`` left: the blocks its pass did not write are no longer pending; a
        key still on one of them is stale."""
        keys_of = self._keys_of(view)
        for b, (key, rid) in list(self.pending.items()):
            if rid != request_id:
                continue
            del self.pending[b]
            if keys_of is not None and key in keys_of(b):
                self.stale[b] = (key, rid)

    def released(self, request_id: str, view: PoolView, finished: bool) -> None:
        """A request's blocks were freed (finish or preempt)."""
        r = self.requests[request_id]
        broken: list[Broken] = []
        self._end_pass(request_id, view)
        if view.free_queue is not None and r.tables:
            self._count("tail-first-free")
            queue = view.free_queue
            freed = frozenset(b for t in r.tables for b in t) & frozenset(queue)
            broken += props.tail_first(request_id, r.tables, freed, queue)
        if finished:
            del self.requests[request_id]
        else:
            keys_of = self._keys_of(view)
            r.left = []
            if keys_of is not None and self.caching:
                hashes = r.hashes(self.hbs)
                for g, table in enumerate(r.tables):
                    for i, b in enumerate(table[: r.num_computed_tokens // self.bs]):
                        if b:
                            key = props.expected_key(hashes, self.hbs, self.bs, i, g)
                            r.left.append((g, i, b, key))
            r.tables, r.num_computed_tokens, r.running = (), 0, False
        self._raise(broken)

    def step_done(self, view: PoolView, reset_result: bool | None = None) -> None:
        """After every request action: ref counts against tables, and the idle pool."""
        broken: list[Broken] = []
        live = [r.tables for r in self.requests.values() if r.running]
        if view.ref_cnt is not None:
            self._count("refcounts-match-tables")
            broken += props.refcounts(live, view.ref_cnt)
        if not any(b for tables in live for t in tables for b in t):
            self._count("idle-pool-free")
            if self.declared.resets_only_without_requests and self.requests:
                reset_result = None  # a request still waits: its refusal is by design
            broken += props.idle_pool(self.setup.pool.num_gpu_blocks, view.free_count, reset_result)
        self._raise(broken)
