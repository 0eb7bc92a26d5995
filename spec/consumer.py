"""Consumer models: what a subscriber to a pool's KV events rebuilds from the stream.

A pool publishes ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``
(:mod:`kvpool.spec.events`); a KV-aware router subscribes and keeps an index of the
prefixes each worker holds. This module states, as plain immutable data, what two kinds of
subscriber keep and which properties of the stream (and of the stream against the pool)
they depend on. Nothing here runs a pool: a caller feeds events in and reads violations
out.

The models (:data:`CONSUMER_MODELS`)
------------------------------------

``count``
    Residency counted per medium, group and hash. Every hash of a ``BlockStored`` adds one
    copy, every ``BlockRemoved`` takes one away; a hash is held while its count is >= 1.
    A pool that caches one hash in two blocks stores it twice and removes it twice. This
    is the contract vLLM documents for its stream.
``set``
    The hashes present per medium and group, as some routers keep them: a store adds the
    hash (a duplicate store changes nothing), a removal drops it whatever other copies the
    pool still has.

The API
-------

- :func:`new_consumer` (``"count"`` or ``"set"``) -> an empty :class:`ConsumerState`.
- :func:`apply_event` ``(state, event, medium=None)`` -> ``(state, violations)``: one
  event applied, with the violations of the stream-only properties this event shows
  (``events-parent-known``, ``events-removed-known``). :func:`apply_events` does the same
  for a sequence, in order. Both are pure: the given state is never changed.
- :func:`chain_violations` ``(events, parents)``: the links a stream names, page by page,
  against the pool's own chain (``events-parent-chain``: the parent named is the page
  before it in the same sequence), for a pool that can say which page comes before which.
- :func:`pool_residency` ``(pool_state)`` -> ``{(group, hash): copies}``: the keys a spec
  :class:`~kvpool.spec.state.PoolState` holds, with multiplicity (blocks per key).
  :func:`residency_of_keys` does the same from raw keys (``hash + 4-byte group``), e.g. a
  real pool's block keys.
- :func:`pool_violations` ``(state, residency, cleared=False, medium=None)``: the consumer
  compared with the pool's keys (``events-replay-index``: multiplicity for ``count``, as a
  set for ``set``). With ``cleared=True`` (the events since the last comparison include an
  ``AllBlocksCleared``), a key the pool holds that the consumer lacks is reported as
  ``events-cleared-empty``: the pool kept it through the clear.
- :func:`consumer_violations` ``(judged, truth)``: two consumers fed the same stream,
  compared (``events-replay-index``). A monitor without a pool runs a ``count`` consumer
  beside a ``set`` consumer as the ground truth vLLM documents, and learns what the set
  consumer lost (a hash the pool still holds in N copies) or keeps in excess.
  :func:`difference_violation` states one such difference (a monitor that follows the
  differences event by event, :mod:`kvpool.conformance.consumers.incremental`, says it in
  the same words).
- :func:`served_blocks` ``(pool_state, block_hashes, group_id)``: how many leading blocks of
  a prefix a lookup on the pool would hit, the truth a router's answer is judged by
  (``router-recall``: it answers no fewer; ``router-precision``: no more).
- :data:`EVENT_PROPERTIES`: id -> one-line statement, for ``kvpool rules`` and the docs.

Every violation is an :class:`EventViolation`: the property id, the hash and group it is
about (``None`` where it names none) and a one-line message.

Media: spec events carry no medium (one pool is one medium); a caller reading vLLM's wire
format passes the event's ``medium`` to :func:`apply_event`, and the consumer keeps each
medium apart. :func:`pool_violations` compares the entries of one medium (``None`` by
default) with the pool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import takewhile
from typing import Literal

from .events import AllBlocksCleared, BlockRemoved, BlockStored, Event, as_fine
from .keys import group_of, hash_of, make_key
from .state import PoolState

#: The consumer models, by name.
ConsumerModel = Literal["count", "set"]
CONSUMER_MODELS: tuple[ConsumerModel, ...] = ("count", "set")

#: What each model keeps, one line each (for ``--help``, ``kvpool rules`` and the docs).
MODEL_DESCRIPTIONS: dict[str, str] = {
    "count": "residency counted per medium, group and hash: every copy is stored and removed "
    "(the contract vLLM documents)",
    "set": "the hashes present per medium and group: a removal drops the hash whatever copies "
    "remain (as some routers keep them)",
}

#: The properties of a KV event stream, by id (stable: traces and docs quote them).
EVENT_PROPERTIES: dict[str, str] = {
    "events-parent-known": "a BlockStored's parent hash is one the consumer holds in that "
    "medium and group (the first block of a request has no parent)",
    "events-parent-chain": "the parent a BlockStored names for each page (the event's parent "
    "for its first, the page before it in the event for the others) is the page before it in "
    "the same sequence, as the pool holds it (none for a sequence's first page)",
    "events-removed-known": "a BlockRemoved names a hash the consumer holds in that medium "
    "and group",
    "events-replay-index": "replaying the stream gives exactly the keys the pool holds: with "
    "their number of copies for the count consumer, as a set for the set consumer",
    "events-cleared-empty": "after AllBlocksCleared the pool holds no key the stream has not "
    "stored again since",
    "router-recall": "for every prefix the stream has named, the consumer believes the worker "
    "holds at least the leading blocks a lookup on the pool would hit (it loses no prefix the "
    "worker still serves)",
    "router-copies": "a BlockRemoved takes one copy away: while the stream still holds a "
    "copy of a hash, the consumer keeps crediting the worker with it (a loss at the removal "
    "of one copy, where a router-recall finding would otherwise be)",
    "router-precision": "for every prefix the stream has named, the consumer believes the "
    "worker holds no more leading blocks than a lookup on the pool would hit (it claims "
    "nothing the worker no longer serves)",
}

#: Where a consumer keeps one hash: ``(medium, group, hash)``.
Residence = tuple[str | None, int, bytes]


@dataclass(frozen=True)
class EventViolation:
    """One property of the stream broken: which, about which hash and group, and how."""

    property: str
    block_hash: bytes | None
    group_id: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.property}: {self.message}"


@dataclass(frozen=True)
class ConsumerState:
    """What a consumer holds: copies per residence (always 1 for the ``set`` model)."""

    model: ConsumerModel
    #: (medium, group, hash) -> copies held, >= 1; absent means not held.
    held: Mapping[Residence, int]
    #: How many events it has applied, and how many of them were ``AllBlocksCleared``.
    events_seen: int = 0
    clears_seen: int = 0

    def copies(self, block_hash: bytes, group_id: int, medium: str | None = None) -> int:
        """How many copies of ``block_hash`` the consumer holds in that medium and group."""
        return self.held.get((medium, group_id, block_hash), 0)

    def residency(self, medium: str | None = None) -> dict[tuple[int, bytes], int]:
        """``{(group, hash): copies}`` of one medium, comparable with :func:`pool_residency`."""
        return {(g, h): n for (m, g, h), n in self.held.items() if m == medium}


def new_consumer(model: str) -> ConsumerState:
    """An empty consumer of ``model``; ``ValueError`` names the known models."""
    if model not in CONSUMER_MODELS:
        raise ValueError(
            f"unknown consumer model {model!r}; known models: {', '.join(CONSUMER_MODELS)}"
        )
    chosen: ConsumerModel = "count" if model == "count" else "set"
    return ConsumerState(model=chosen, held={})


def short_hash(block_hash: bytes | None) -> str:
    """A hash as it appears in messages: its first 8 bytes in hex."""
    if block_hash is None:
        return "none"
    text = block_hash[:8].hex()
    return text + ("..." if len(block_hash) > 8 else "")


def _where(block_hash: bytes, group: int, medium: str | None) -> str:
    place = f"group {group}" if medium is None else f"group {group}, medium {medium}"
    return f"hash {short_hash(block_hash)} ({place})"


def apply_in_place(
    model: ConsumerModel, held: dict[Residence, int], event: Event, medium: str | None
) -> list[EventViolation]:
    """One event applied to a consumer's holdings ``held``, in place (:func:`apply_events`
    copies them first); the violations of the stream properties the event shows."""
    found: list[EventViolation] = []
    match event:
        case BlockStored(block_hashes=hashes, parent_block_hash=parent, group_id=group):
            if parent is not None and held.get((medium, group, parent), 0) < 1:
                found.append(
                    EventViolation(
                        "events-parent-known",
                        parent,
                        group,
                        f"BlockStored of {len(hashes)} block(s) names parent "
                        f"{_where(parent, group, medium)}, which the {model} consumer "
                        "does not hold",
                    )
                )
            for h in hashes:
                where = (medium, group, h)
                held[where] = held.get(where, 0) + 1 if model == "count" else 1
        case BlockRemoved(block_hash=h, group_id=group):
            where = (medium, group, h)
            copies = held.get(where, 0)
            if copies < 1:
                found.append(
                    EventViolation(
                        "events-removed-known",
                        h,
                        group,
                        f"BlockRemoved of {_where(h, group, medium)}, which the {model} "
                        "consumer does not hold",
                    )
                )
            elif copies == 1 or model == "set":
                del held[where]
            else:
                held[where] = copies - 1
        case AllBlocksCleared():
            for where in [w for w in held if w[0] == medium]:
                del held[where]
    return found


def chain_violations(
    events: Iterable[Event], parents: Mapping[tuple[int, bytes], bytes | None]
) -> tuple[EventViolation, ...]:
    """``events-parent-chain``: the links ``events`` name, against ``parents``, the pool's
    own chain (``(group, hash)`` of every page it holds -> the hash of the page before it
    in its sequence, ``None`` for a first page). A page the pool no longer holds is not
    judged (it left within the same events); a parent nobody was told of is
    ``events-parent-known``'s, judged before this."""
    found: list[EventViolation] = []
    for event in events:
        if not isinstance(event, BlockStored):
            continue
        named, group = event.parent_block_hash, event.group_id
        for h in event.block_hashes:
            if (group, h) in parents and parents[(group, h)] != named:
                truth = parents[(group, h)]
                before = "no page" if truth is None else f"hash {short_hash(truth)}"
                found.append(
                    EventViolation(
                        "events-parent-chain",
                        h,
                        group,
                        f"BlockStored links {_where(h, group, None)} to parent "
                        f"{short_hash(named)}; the pool holds it after {before} in its "
                        "sequence",
                    )
                )
            named = h
    return tuple(found)


def apply_events(
    state: ConsumerState, events: Iterable[Event], medium: str | None = None
) -> tuple[ConsumerState, tuple[EventViolation, ...]]:
    """``events`` applied in order; the new state and every violation they show."""
    held = dict(state.held)
    found: list[EventViolation] = []
    seen = clears = 0
    for event in events:
        found.extend(apply_in_place(state.model, held, event, medium))
        seen += 1
        clears += isinstance(event, AllBlocksCleared)
    new = ConsumerState(
        model=state.model,
        held=held,
        events_seen=state.events_seen + seen,
        clears_seen=state.clears_seen + clears,
    )
    return new, tuple(found)


def apply_event(
    state: ConsumerState, event: Event, medium: str | None = None
) -> tuple[ConsumerState, tuple[EventViolation, ...]]:
    """One event applied; the new state and the violations this event shows."""
    return apply_events(state, (event,), medium)


def residency_of_keys(keys: Iterable[bytes]) -> dict[tuple[int, bytes], int]:
    """``{(group, hash): copies}`` of raw keys (``hash + 4-byte group``), one per block entry."""
    counted = Counter((group_of(k), hash_of(k)) for k in keys)
    return dict(counted)


def pool_residency(state: PoolState) -> dict[tuple[int, bytes], int]:
    """``{(group, hash): copies}``: the keys ``state`` holds, each with its number of blocks;
    each hash as the pool's events name it (:func:`event_hash`)."""
    counted: Counter[tuple[int, bytes]] = Counter()
    for k, blocks in state.cache.items():
        counted[(group_of(k), event_hash(state, hash_of(k)))] += len(blocks)
    return dict(counted)


def event_hash(state: PoolState, block_hash: bytes) -> bytes:
    """``block_hash`` as ``state``'s events name it: a coarse key as its last fine hash
    where the profile publishes 64-bit integers that cannot tell the two apart
    (``coarse_events_name_fine_hash``), else itself."""
    return as_fine(block_hash) if state.profile.coarse_events_name_fine_hash else block_hash


def served_blocks(state: PoolState, block_hashes: Iterable[bytes], group_id: int) -> int:
    """How many leading blocks of the prefix ``block_hashes`` (in ``group_id``) a lookup on
    ``state`` hits: a lookup walks the hashes in order and stops at the first one the pool
    caches in no block of that group.

    post: 0 <= __return__
    """
    if state.profile.coarse_events_name_fine_hash:  # a consumer's hashes name fine keys
        named = pool_residency(state)
        return sum(1 for _ in takewhile(lambda h: named.get((group_id, h), 0), block_hashes))
    served = 0
    for h in block_hashes:
        if not state.cache.get(make_key(h, group_id)):
            break
        served += 1
    return served


def _differences(
    model: ConsumerModel,
    have: Mapping[tuple[int, bytes], int],
    want: Mapping[tuple[int, bytes], int],
) -> list[tuple[int, bytes, int, int]]:
    """``(group, hash, consumer copies, true copies)`` wherever the model sees a difference."""
    out = []
    for group, h in sorted(set(have) | set(want)):
        mine, theirs = have.get((group, h), 0), want.get((group, h), 0)
        differs = mine != theirs if model == "count" else (mine > 0) != (theirs > 0)
        if differs:
            out.append((group, h, mine, theirs))
    return out


def pool_violations(
    state: ConsumerState,
    residency: Mapping[tuple[int, bytes], int],
    *,
    cleared: bool = False,
    medium: str | None = None,
) -> tuple[EventViolation, ...]:
    """The consumer compared with the pool's keys ``residency`` (see :func:`pool_residency`).

    ``events-replay-index`` for every key the two disagree on (copies for ``count``,
    presence for ``set``); with ``cleared``, a key the pool holds in more copies than the
    consumer is ``events-cleared-empty`` instead.
    """
    found = []
    for group, h, mine, theirs in _differences(state.model, state.residency(medium), residency):
        if cleared and theirs > mine:
            found.append(
                EventViolation(
                    "events-cleared-empty",
                    h,
                    group,
                    f"after AllBlocksCleared the pool still holds {_where(h, group, medium)} "
                    f"in {theirs} block(s); the stream stored it {mine} time(s) since",
                )
            )
            continue
        held = f"holds {mine} cop{'y' if mine == 1 else 'ies'}"
        if state.model == "set":
            held = "holds it" if mine else "does not hold it"
        found.append(
            EventViolation(
                "events-replay-index",
                h,
                group,
                f"the pool holds {_where(h, group, medium)} in {theirs} block(s); the "
                f"{state.model} consumer {held}",
            )
        )
    return tuple(found)


def consumer_violations(judged: ConsumerState, truth: ConsumerState) -> tuple[EventViolation, ...]:
    """``judged`` compared with ``truth``, both fed the same stream (``events-replay-index``).

    With ``truth`` a ``count`` consumer (vLLM's documented contract) and ``judged`` a
    ``set`` one, each violation is a hash the set consumer lost while the pool still holds
    copies of it (or one it keeps that the pool no longer holds).
    """
    found = []
    media = sorted({w[0] for w in judged.held} | {w[0] for w in truth.held}, key=str)
    for medium in media:
        have, want = judged.residency(medium), truth.residency(medium)
        for group, h, mine, theirs in _differences(judged.model, have, want):
            found.append(
                difference_violation(judged.model, truth.model, (medium, group, h), mine, theirs)
            )
    return tuple(found)


def difference_violation(
    judged: ConsumerModel, truth: ConsumerModel, where: Residence, mine: int, theirs: int
) -> EventViolation:
    """The ``events-replay-index`` violation of a ``judged`` consumer holding ``mine``
    copies at ``where`` where a ``truth`` consumer holds ``theirs``."""
    medium, group, h = where
    if theirs > 0 and mine == 0:
        what = f"lost {_where(h, group, medium)} while the {truth} consumer "
        what += f"still holds {theirs} cop"
        what += "y" if theirs == 1 else "ies"
    else:
        what = f"holds {_where(h, group, medium)} in {mine} cop"
        what += "y" if mine == 1 else "ies"
        what += f"; the {truth} consumer holds {theirs}"
    return EventViolation("events-replay-index", h, group, f"the {judged} consumer {what}")
