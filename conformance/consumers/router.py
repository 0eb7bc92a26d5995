"""Consumer protocol 2: a router as it is deployed, asked the question its users ask.

A router (protocol 2) is started once for a stream and closed at its end; it is fed the
stream in process or reads it off the wire itself, at the addresses the suite gives; it
is asked with a prompt's tokens (and the pool's hashes of its whole blocks, for a router
fed in process) and answers, per data-parallel rank, how many leading blocks of the
prompt it credits the worker with. A router reports the last batch it applied (its
watermark), which the suite waits on before it asks.

Required: ``name`` (str), ``protocol = 2`` and ``credited(prompt)``. Everything else is
an optional hook (:data:`kvpool.conformance.hooks.ROUTER`, checked when the router is
built): ``feeds`` (``"process"`` or ``"wire"``), ``resets`` (``"clear"`` or
``"new-worker"``), ``ranks`` (``"per-rank"``, ``"one-worker"`` or ``"picks-rank"``),
``start(wire)``,
``apply(events, rank)``, ``applied()`` and ``close()``.

A protocol 1 consumer (``apply(events)``, ``held_blocks(hashes, group)``,
``residency()``) is adapted automatically (:class:`FromProtocol1`): fed in process, one
view per rank, asked with the hashes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kvpool.spec.events import Event

from .protocol import Consumer, ConsumerError

PROTOCOL = 2
#: The methods of a protocol 1 consumer (:class:`~.protocol.Consumer`).
PROTOCOL1 = ("apply", "held_blocks", "residency")
#: How a router is fed: the suite calls ``apply``, or it subscribes to the wire itself.
FEEDS = ("process", "wire")
#: How a router is emptied between test cases: an ``AllBlocksCleared`` on the stream, or
#: a new worker id (a new :class:`Wire`, through ``close`` then ``start``).
RESETS = ("clear", "new-worker")
#: How it treats data-parallel ranks: a view per rank (the suite compares rank by rank);
#: ranks as endpoints of one worker (the suite compares with the best rank); or a view per
#: rank from which it picks one rank per prompt, as a router routes a request (it credits
#: that rank alone; the suite compares its credit with the picked rank's blocks for what it
#: over-claims and with the best rank's for what it missed).
RANKS = ("per-rank", "one-worker", "picks-rank")


@dataclass(frozen=True)
class Wire:
    """Where the stream of one worker is published, as the release writes it.

    ``publishers[r]`` is data-parallel rank ``r``'s ZMQ PUB endpoint (frames: topic,
    8-byte big-endian sequence, msgpack ``KVEventBatch``); ``replays[r]`` its replay
    (ROUTER) endpoint, or empty when the publisher has none. ``block_size`` is the tokens
    per block the worker's events name; ``model`` the model name the worker serves.
    """

    publishers: tuple[str, ...]
    replays: tuple[str, ...]
    block_size: int
    model: str = "default"

    @property
    def ranks(self) -> int:
        return len(self.publishers)


@dataclass(frozen=True)
class Prompt:
    """What a router is asked about: a prompt's tokens, its salt and LoRA, and the pool's
    hashes of its whole blocks (root first, in group ``group_id``) for a router fed the
    pool's events in process, which names no tokens."""

    tokens: tuple[int, ...]
    block_hashes: tuple[bytes, ...]
    group_id: int = 0
    salt: str | None = None
    lora: str | None = None


@runtime_checkable
class Router(Protocol):
    """Consumer protocol 2 (the required members; the hooks are optional)."""

    name: str
    protocol: int

    def credited(self, prompt: Prompt) -> Mapping[int, int]:
        """The leading whole blocks of ``prompt`` it credits the worker with, by
        data-parallel rank (a rank left out: 0; a ``one-worker`` router: rank 0; a
        ``picks-rank`` router: the one rank it picks)."""
        ...


def hook(router: object, name: str, default: Any) -> Any:
    """A router's optional hook, or ``default``."""
    return getattr(router, name, default)


def feeds(router: object) -> str:
    return str(hook(router, "feeds", "process"))


def resets(router: object) -> str:
    return str(hook(router, "resets", "clear"))


def ranks(router: object) -> str:
    return str(hook(router, "ranks", "per-rank"))


class FromProtocol1:
    """A protocol 1 consumer as a protocol 2 router: one view per rank, built by the
    factory at ``start``, fed in process, asked with the hashes."""

    protocol = PROTOCOL
    feeds = "process"
    resets = "clear"
    ranks = "per-rank"

    def __init__(self, factory: Callable[[], Consumer], name: str) -> None:
        self.factory = factory
        self.name = name
        self.views: list[Consumer] = []
        self.batches: dict[int, int] = {}

    def start(self, wire: Wire) -> None:
        self.views = [self.factory() for _ in range(wire.ranks)]
        self.batches = {}

    def apply(self, events: Sequence[Event], rank: int) -> None:
        self.views[rank].apply(events)
        self.batches[rank] = self.batches.get(rank, -1) + 1

    def applied(self) -> Mapping[int, int]:
        return dict(self.batches)

    def credited(self, prompt: Prompt) -> Mapping[int, int]:
        return {
            rank: int(view.held_blocks(prompt.block_hashes, prompt.group_id))
            for rank, view in enumerate(self.views)
        }

    def close(self) -> None:
        self.views = []


def is_protocol1(obj: object) -> bool:
    """Whether ``obj`` is a protocol 1 consumer (no ``protocol``, the three methods)."""
    return getattr(obj, "protocol", None) is None and all(
        callable(getattr(obj, m, None)) for m in PROTOCOL1
    )


def router_problems(obj: object) -> list[str]:
    """What is wrong with a protocol 2 router: its required members, then its hooks."""
    from ..hooks import router_problems as hook_problems

    problems = []
    if getattr(obj, "protocol", None) != PROTOCOL:
        problems.append(f"protocol is {getattr(obj, 'protocol', None)!r}, not {PROTOCOL}")
    if not isinstance(getattr(obj, "name", None), str):
        problems.append("it has no str name")
    if not callable(getattr(obj, "credited", None)):
        problems.append("it has no credited(prompt)")
    for attribute, allowed in (("feeds", FEEDS), ("resets", RESETS), ("ranks", RANKS)):
        value = getattr(obj, attribute, allowed[0])
        if value not in allowed:
            problems.append(f"{attribute} is {value!r}: one of {', '.join(allowed)}")
    if feeds(obj) == "process" and not callable(getattr(obj, "apply", None)):
        problems.append("it is fed in process (feeds = 'process') but has no apply(events, rank)")
    return problems + hook_problems(obj)


def as_router(obj: object, name: str, factory: Callable[[], object]) -> Router:
    """``obj`` (what a factory returned) as a protocol 2 router: a protocol 1 consumer
    adapted, a protocol 2 router checked; :class:`ConsumerError` names what is wrong."""
    if is_protocol1(obj):
        return FromProtocol1(factory, name)  # type: ignore[arg-type]
    problems = router_problems(obj)
    if problems and getattr(obj, "protocol", None) is None:
        lacks = [m for m in PROTOCOL1 if not callable(getattr(obj, m, None))]
        raise ConsumerError(
            f"consumer {name!r} obj {type(obj).__name__}, which lacks "
            f"{', '.join(lacks)} (a protocol 1 consumer) and says no protocol = {PROTOCOL} "
            "(a protocol 2 router)"
        )
    if problems:
        raise ConsumerError(
            f"consumer {name!r} obj {type(obj).__name__}, a protocol 2 router with "
            "problems: " + "; ".join(problems)
        )
    return obj  # type: ignore[return-value]


class InProcess:
    """A protocol 2 router fed in process, as a protocol 1 consumer (the events level's
    and the monitor's judge feed one worker's stream and ask with the pool's hashes): one
    rank, started at once (a router that reads the wire goes through
    :class:`~.on_wire.OnTheWire`)."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.name = router.name
        self.groups: tuple[int, ...] | None = getattr(router, "groups", None)
        hook(router, "start", lambda wire: None)(Wire(("inproc://unused",), (), 1))

    def apply(self, events: Sequence[Event]) -> tuple[()]:
        self.router.apply(events, 0)  # type: ignore[attr-defined]
        return ()

    def held_blocks(self, block_hashes: Sequence[bytes], group_id: int) -> int:
        prompt = Prompt((), tuple(block_hashes), group_id)
        return int(self.router.credited(prompt).get(0, 0))

    def residency(self) -> None:
        return None
