"""Drawing actions from the spec's current state.

Pools are small and the token alphabet tiny on purpose: two requests then often share a
prefix, so keys get duplicates, cached blocks get hit while free, allocations evict them,
and multi-group lookups miss in one group. Each ``draw_*`` returns an action inside the
contract; each ``bad_*`` one outside it (the ``robustness`` level), or ``None`` when the
state offers no way to break that rule.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

from kvpool.spec import (
    NULL_BLOCK,
    Action,
    CacheFullBlocks,
    CachePartialBlock,
    EvictBlocks,
    FreeBlocks,
    GetCachedBlock,
    GetNewBlocks,
    IsBlockWritable,
    MoveBlockHashes,
    PeerGetNewBlocks,
    PoolConfig,
    PoolState,
    Touch,
    UnpinBlocks,
)
from kvpool.spec.hashing import request_block_hashes
from kvpool.spec.keys import group_of, hash_of, make_key

from ...search.choices import Choices
from .block_states import BLOCK_STATES, block_states

GROUPS = (0, 0, 1)
WATCHERS = ("w1", "w2")
SALTS: tuple[tuple[str, ...] | None, ...] = (None, None, None, ("salt-a",))


def pool_config(choices: Choices, max_blocks: int, robustness: bool) -> PoolConfig:
    """A small pool, drawn as :func:`configs` draws one: caching mostly on, events mostly
    on, sometimes a peer pool."""
    return PoolConfig(
        num_gpu_blocks=choices.integer(1 if robustness else 2, max_blocks, "num_gpu_blocks"),
        enable_caching=choices.choice([True, True, True, False], "caching"),
        hash_block_size=choices.choice([1, 2], "hash_block_size"),
        enable_kv_cache_events=choices.choice([True, True, False], "events"),
        peer_blocks=choices.choice([0, 3], "peer"),
    )


def held(state: PoolState) -> list[int]:
    return [b for b in range(1, state.num_blocks) if state.ref_cnt[b] > 0]


def keyed(state: PoolState) -> list[int]:
    return [b for b in range(1, state.num_blocks) if state.primary[b] is not None]


def request_hashes(data: Choices, hbs: int, num_hashes: int) -> tuple[bytes, ...]:
    """The chained hashes of a request of ``num_hashes`` full hash blocks, tokens in {1, 2}
    (mostly 1, so that requests often share a prefix)."""
    n = num_hashes * hbs
    tokens = tuple(data.items([1, 1, 1, 2], n, n, "tokens"))
    salt = data.choice(SALTS, "salt")
    hashes = _HASHED.get((tokens, hbs, salt))
    if hashes is None:
        if len(_HASHED) >= HASHED_REQUESTS:
            _HASHED.clear()
        hashes = _HASHED[(tokens, hbs, salt)] = request_block_hashes(tokens, hbs, salt)
    return hashes


#: Requests already hashed (the tokens, the hash block size, the salt -> the hashes): the
#: alphabet is tiny, so the same requests come again and again, and hashing one (the
#: spec's encoding, in Python) cost more than the rest of its drawing. At most
#: :data:`HASHED_REQUESTS` are kept.
_HASHED: dict[tuple[tuple[int, ...], int, tuple[str, ...] | None], tuple[bytes, ...]] = {}
HASHED_REQUESTS = 4096


#: The weights :func:`by_state` gives the block states when a call should seek out the
#: rare ones: a held block whose watcher waits, an unpinned block, a shared or a cached one
#: (any other state weighs 1). For the queries and the calls that leave a block in a state
#: as rare, or nearly (caching, eviction, a move); the calls that take a block out of its
#: state (a free, an unpin, a touch) draw the states evenly, so that the rare ones last.
SEEK_RARE: dict[str, int] = {
    "free-cached": 2,
    "held watched": 4,
    "shared unkeyed": 2,
    "shared keyed": 3,
    "unpinned unkeyed": 3,
    "unpinned keyed": 4,
}


#: For the calls that take a block out of its state: the rarest a little more often than
#: the rest, listed first, yet not so often that they never last.
RELEASE_RARE: dict[str, int] = {"held watched": 6, "shared keyed": 2}
#: For an unpin of one block: a shared block (it keeps a hold, and its watcher waits), a
#: block whose watcher already waits (it is replaced) or a registered one (it becomes
#: unpinned with its key) more often than a private one.
UNPIN_ONE: dict[str, int] = {
    "shared unkeyed": 3,
    "shared keyed": 3,
    "held watched": 3,
    "registered": 2,
}
#: For a touch: a hit on a free block (cached, or unpinned with a key) as often as on a held
#: one, as before the states were drawn.
TOUCH_HITS: dict[str, int] = {"free-cached": 2, "unpinned keyed": 2}


def has_rare_blocks(state: PoolState) -> bool:
    """Whether a block is in one of the rarest states (weight 3 or more in
    :data:`SEEK_RARE`)."""
    return not _RAREST.isdisjoint(block_states(state))


_RAREST = frozenset(s for s, weight in SEEK_RARE.items() if weight >= 3)


def by_state(
    data: Choices,
    state: PoolState,
    blocks: Sequence[int],
    label: str,
    weights: Mapping[str, int] = {},
) -> int:
    """One of ``blocks`` (not empty): first one of the block states they are in (evenly,
    or weighted by ``weights``: 1 for a state not in it), then a block in that state. A
    block in a rare state is then drawn about as often as a block in a common one; a block
    listed more than once is drawn more often within its state."""
    in_state: dict[str, list[int]] = {}
    states = block_states(state)
    for b in blocks:
        in_state.setdefault(states[b], []).append(b)
    # heaviest first: a drawer biased towards the first option (Hypothesis is) favours them
    order = sorted(in_state, key=lambda s: (-weights.get(s, 1), BLOCK_STATES.index(s)))
    chosen = data.weighted([(s, weights.get(s, 1)) for s in order], f"{label} state")
    return data.choice(in_state[chosen], label)


def several_by_state(
    data: Choices,
    state: PoolState,
    blocks: Sequence[int],
    low: int,
    high: int,
    label: str,
    weights: Mapping[str, int] = {},
) -> list[int]:
    """Between ``low`` and ``high`` distinct ones of ``blocks``, each drawn :func:`by_state`."""
    left = list(dict.fromkeys(blocks))
    chosen: list[int] = []
    for _ in range(data.integer(min(low, len(left)), min(high, len(left)), f"{label} count")):
        chosen.append(by_state(data, state, left, label, weights))
        left.remove(chosen[-1])
    return chosen


def releases(data: Choices, state: PoolState, max_size: int = 4) -> tuple[int, ...]:
    """Held blocks to release, each at most as often as it is held, in any order, each
    drawn :func:`by_state`: keyed blocks, where they go being where pools differ, and
    blocks whose watcher waits as often as the others. Mostly distinct blocks, sometimes
    one listed again (a block held twice, released twice in one call)."""
    holds = {b: state.ref_cnt[b] for b in held(state)}
    kept: list[int] = []
    for _ in range(data.choice([*range(1, max_size + 1), 0], "releases")):
        fresh = [b for b, n in holds.items() if n and b not in kept]
        again = [b for b, n in holds.items() if n and b in kept]
        if not fresh and not again:
            break
        pick_again = bool(again) and (not fresh or data.boolean("again"))
        candidates = again if pick_again else fresh
        kept.append(by_state(data, state, candidates, "block", RELEASE_RARE))
        holds[kept[-1]] -= 1
    if data.boolean("with null"):
        kept.insert(data.integer(0, len(kept), "null at"), NULL_BLOCK)
    return tuple(kept)


# --- inside the contract ----------------------------------------------------------------


def draw_get_new_blocks(data: Choices, state: PoolState, ctx: Context) -> Action:
    # one block first and none last: a drawer biased towards the first option (Hypothesis
    # is) then hands out blocks, instead of asking for none most of the time
    counts = [n for n in (1, 2, 3, 4, 0) if n <= len(state.free_queue)]
    return GetNewBlocks(data.choice(counts, "n"))


def draw_free_blocks(data: Choices, state: PoolState, ctx: Context) -> Action:
    blocks = releases(data, state)
    evict_first = ctx.evict_first and data.boolean("evict_first")
    foreign: tuple[int, ...] = ()
    if ctx.peer and state.peer is not None and held(state.peer):
        foreign = releases(data, state.peer, max_size=2)
    return FreeBlocks(blocks, evict_first, foreign)


def draw_touch(data: Choices, state: PoolState, ctx: Context) -> Action:
    hits = [NULL_BLOCK, *sorted(set(keyed(state)) | set(held(state)))]
    count = data.integer(1, 3, "blocks")
    return Touch(tuple(by_state(data, state, hits, "block", TOUCH_HITS) for _ in range(count)))


def draw_unpin_blocks(data: Choices, state: PoolState, ctx: Context) -> Action:
    """Held blocks released, or (about half the time) one block chosen by its state: a
    shared one released down to one hold, so that it stays held with its watcher waiting
    (the rarest state), any other released once."""
    watcher = data.choice(WATCHERS, "watcher")
    if data.choice([True, False], "one block by its state"):
        block = by_state(data, state, held(state), "block", UNPIN_ONE)
        return UnpinBlocks((block,) * max(1, state.ref_cnt[block] - 1), watcher)
    blocks = releases(data, state, max_size=3)
    return UnpinBlocks(tuple(b for b in blocks if b != NULL_BLOCK), watcher)


def draw_duplicate(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    """A held block without a key cached under a key some block already carries (one of the
    requests drawn before, up to that key's block): the key then has duplicates, which
    evictions must drop one at a time. ``None`` when no such key or block is at hand."""
    hbs = state.config.hash_block_size
    unkeyed = [b for b in held(state) if state.primary[b] is None]
    positions = {h: (r, i) for r in ctx.requests for i, h in enumerate(r)}
    keys = sorted(k for k in state.cache if hash_of(k) in positions)
    if not unkeyed or not keys:
        return None
    key = data.choice(keys, "duplicate of")
    request, index = positions[hash_of(key)]
    prefix = [data.choice([NULL_BLOCK, *held(state)], "cached") for _ in range(index)]
    block = data.choice(unkeyed, "new duplicate")
    hashes = request[: index + 1]
    return CacheFullBlocks(hashes, (*prefix, block), index, index + 1, hbs, group_of(key))


def draw_cache_full_blocks(data: Choices, state: PoolState, ctx: Context) -> Action:
    odds = 1 if ctx.for_events else 2  # one in two draws, or one in three
    duplicate = (
        draw_duplicate(data, state, ctx) if data.integer(0, odds, "duplicate") == 0 else None
    )
    if duplicate is not None:
        return duplicate
    hbs = state.config.hash_block_size
    block_size = hbs * data.choice([1, 1, 2], "block size x")
    num_cached = data.integer(0, 2, "num_cached_blocks")
    first_tokens = (num_cached + 1) * block_size
    fresh = [
        b for b in held(state) if (p := state.primary[b]) is None or p.num_tokens < first_tokens
    ]
    new = several_by_state(data, state, fresh or [NULL_BLOCK], 1, 3, "new full block", SEEK_RARE)
    if data.boolean("with null"):
        new.insert(data.integer(0, len(new), "null at"), NULL_BLOCK)
    prefix = [data.choice([NULL_BLOCK, *held(state)], "cached") for _ in range(num_cached)]
    num_full = num_cached + len(new)
    mask = None
    if data.integer(0, 3, "masked") == 0:
        mask = tuple(data.items([True, False], len(new), len(new), "block_mask"))
    extra = data.integer(0, 1, "extra hashes")
    hashes = ctx.request(data, hbs, num_full * (block_size // hbs) + extra)
    return CacheFullBlocks(
        hashes,
        (*prefix, *new),
        num_cached,
        num_full,
        block_size,
        data.choice(GROUPS, "group"),
        mask,
    )


def draw_cache_partial_block(data: Choices, state: PoolState, ctx: Context) -> Action:
    hbs = state.config.hash_block_size
    block = by_state(data, state, [NULL_BLOCK, *held(state)], "block", SEEK_RARE)
    num_hashes = data.integer(1, 4, "hashes")
    hashes = ctx.request(data, hbs, num_hashes)
    return CachePartialBlock(
        hashes,
        block,
        hbs * data.integer(1, num_hashes, "num hash blocks"),
        data.choice(GROUPS, "group"),
        hbs * data.choice([1, 2, 4] if ctx.for_events else [1, 2], "block size x"),
        data.integer(0, 3, "replace") == 0,
    )


#: Where a drawn lookup's key comes from, and how often.
LOOKUP_SOURCES = ("dropped", "dropped", "cached", "cached", "cached", "recent")


def draw_get_cached_block(data: Choices, state: PoolState, ctx: Context) -> Action:
    """A key that just lost a block (evicted, reset, moved away, a duplicate dropped: a
    pool answering from a stale entry shows here), a cached key (keys with duplicates most
    of all), or a recent request's hash, possibly never cached; over one or two groups."""
    duplicated = [k for k, blocks in state.cache.items() if len(blocks) > 1]
    keys = sorted([*duplicated, *duplicated, *state.cache])
    recent = sorted(set(ctx.hashes[-8:])) or [b"\x00" * 4]
    source = data.choice(LOOKUP_SOURCES, "lookup of")
    if source == "dropped" and ctx.dropped:
        key = data.choice(ctx.dropped, "dropped key")
    elif source != "recent" and keys:
        key = data.choice(keys, "key")
    else:
        key = make_key(data.choice(recent, "hash"), data.choice(GROUPS, "group"))
    block_hash, groups = hash_of(key), [group_of(key)]
    if data.boolean("two groups"):
        groups.insert(
            data.integer(0, 1, "at"),
            data.choice(GROUPS, "other group"),
        )
    return GetCachedBlock(block_hash, tuple(groups))


def parent_blocks(state: PoolState, ctx: Context) -> list[int]:
    """Blocks cached under a key that comes before another cached key of the same request
    and group: evicting one leaves a child cached after its parent went (what a router's
    tree, which hangs a child under its parent, gets wrong)."""
    positions = {h: (n, i) for n, r in enumerate(ctx.requests) for i, h in enumerate(r)}
    placed = [
        (positions[hash_of(k)], group_of(k), k) for k in state.cache if hash_of(k) in positions
    ]
    found: set[int] = set()
    for (request, index), group, key in placed:
        if any(r == request and g == group and i > index for (r, i), g, _ in placed):
            found.update(state.cache[key])
    return sorted(found)


def draw_evict_blocks(data: Choices, state: PoolState, ctx: Context) -> Action:
    parents = parent_blocks(state, ctx) if ctx.for_events else []
    if parents and data.boolean("evict a parent"):
        return EvictBlocks((data.choice(parents, "parent block"),))
    blocks = range(state.num_blocks)
    count = data.choice([2, 1, 0], "ids")
    return EvictBlocks(tuple(by_state(data, state, blocks, "id", SEEK_RARE) for _ in range(count)))


def draw_move_block_hashes(data: Choices, state: PoolState, ctx: Context) -> Action:
    # mostly a keyed source, blocks with extra keys more often: their keys must all move
    with_extras = [b for b in keyed(state) if state.extra[b]]
    sources = keyed(state) + with_extras * 3
    if not sources or data.integer(0, 3, "any source") == 0:
        sources = list(range(state.num_blocks))
    src = by_state(data, state, sources, "src", SEEK_RARE)
    unkeyed = [b for b in range(1, state.num_blocks) if state.primary[b] is None]
    dst = by_state(data, state, unkeyed, "dst", SEEK_RARE)
    return MoveBlockHashes(src, dst)


def draw_is_block_writable(data: Choices, state: PoolState, ctx: Context) -> Action:
    return IsBlockWritable(by_state(data, state, range(state.num_blocks), "block"))


def draw_peer_get_new_blocks(data: Choices, state: PoolState, ctx: Context) -> Action:
    assert state.peer is not None
    return PeerGetNewBlocks(data.integer(0, len(state.peer.free_queue), "n"))


# --- outside the contract (robustness) --------------------------------------------------


def bad_allocation(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    free = len(state.free_queue)
    return GetNewBlocks(data.choice([free + 1, free + 2, -1], "n"))


def bad_double_free(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    candidates = list(range(1, state.num_blocks))
    if not candidates:
        return None
    b = data.choice(candidates, "block")
    return FreeBlocks((b,) * (state.ref_cnt[b] + 1))


def bad_touch(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    nameless = [b for b in state.free_queue if state.primary[b] is None]
    if not nameless:
        return None
    return Touch((data.choice(nameless, "block"),))


def bad_unpin(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    free = list(state.free_queue)
    block = data.choice([NULL_BLOCK, *free], "block")
    return UnpinBlocks((block,), "w1")


def bad_cache(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    """Caching with caching off, a free block, or a block already fully cached."""
    hbs = state.config.hash_block_size
    if not state.config.enable_caching:
        candidates = held(state)
    else:
        candidates = list(state.free_queue) + [
            b for b in held(state) if (p := state.primary[b]) is not None and p.num_tokens >= hbs
        ]
    if not candidates:
        return None
    block = data.choice(candidates, "block")
    hashes = request_hashes(data, hbs, 1)
    return CacheFullBlocks(hashes, (block,), 0, 1, hbs, 0)


def bad_partial(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    blocks = held(state)
    if not blocks:
        return None
    hbs = state.config.hash_block_size
    tokens = data.choice([0, hbs * 9] + ([1] if hbs > 1 else []), "tokens")
    hashes = request_hashes(data, hbs, 2)
    return CachePartialBlock(hashes, data.choice(blocks, "block"), tokens, 0, hbs)


def bad_evict(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    return EvictBlocks((data.choice([state.num_blocks, state.num_blocks + 5], "id"),))


def bad_move(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    src = data.integer(0, state.num_blocks - 1, "src")
    dst = data.choice([NULL_BLOCK, *keyed(state)], "dst")
    return MoveBlockHashes(src, dst)


def bad_foreign(data: Choices, state: PoolState, ctx: Context) -> Action | None:
    if not ctx.peer:
        return None
    if state.peer is None:
        return FreeBlocks((), False, (1,))
    free = list(state.peer.free_queue)
    if not free:
        return None
    return FreeBlocks((), False, (data.choice(free, "peer block"),))


Drawer = Callable[[Choices, PoolState, "Context"], Action]
BadDrawer = Callable[[Choices, PoolState, "Context"], Action | None]


def always(action: Action) -> Drawer:
    """The drawer of an operation that takes no argument: ``action`` every time."""
    return lambda choices, state, ctx: action


#: How many keys that recently lost a block drawing remembers, for lookups.
DROPPED_KEYS = 12


class Context:
    """What drawing remembers across steps of one test case: recent request hashes and the
    keys that recently lost a block (for lookups), and what the target can take."""

    def __init__(self, evict_first: bool, peer: bool, for_events: bool = False) -> None:
        self.evict_first = evict_first
        self.peer = peer
        #: Drawing for the events level: partial entries also in blocks of four hash
        #: blocks (several fine boundaries inside one block, where partial events chain),
        #: and duplicate copies of a cached key twice as often (their removals one at a
        #: time are where consumers differ).
        self.for_events = for_events
        self.hashes: list[bytes] = []
        self.requests: list[tuple[bytes, ...]] = []
        #: Keys a block left (evicted, reset, moved away, one of its duplicates dropped),
        #: most recent last; at most :data:`DROPPED_KEYS`.
        self.dropped: list[bytes] = []
        #: Whether the last step dropped a key from a block.
        self.just_dropped = False
        self._cache: Mapping[bytes, tuple[int, ...]] = {}

    def fork(self) -> Context:
        """A copy that goes on from here as this one would, leaving this one as it is."""
        forked = copy.copy(self)
        forked.hashes, forked.requests = list(self.hashes), list(self.requests)
        forked.dropped = list(self.dropped)
        return forked

    def observe(self, state: PoolState) -> None:
        """Note the keys that lost a block since the state last observed."""
        self.just_dropped = False
        if state.cache is not self._cache:  # a step that left the index alone dropped nothing
            for key, blocks in self._cache.items():
                now = state.cache.get(key, ())
                if any(b not in now for b in blocks):
                    if key in self.dropped:
                        self.dropped.remove(key)
                    self.dropped.append(key)
                    self.just_dropped = True
        del self.dropped[:-DROPPED_KEYS]
        self._cache = state.cache

    def request(self, data: Choices, hbs: int, num_hashes: int) -> tuple[bytes, ...]:
        """Hashes of a request with at least ``num_hashes`` blocks: half the time one seen
        before (so the same prefix gets cached twice: duplicate keys; one whose prefix is
        cached now twice as often), else a new one."""
        seen = [r for r in self.requests if len(r) >= num_hashes]
        reuse = data.boolean("same request again") if seen else False
        if reuse:
            cached = {hash_of(key) for key in self._cache}
            again = [r for r in seen if not cached.isdisjoint(r[:num_hashes])]
            return data.choice(seen + again, "request")
        hashes = request_hashes(data, hbs, num_hashes)
        self.requests.append(hashes)
        self.hashes.extend(hashes)
        return hashes
