"""The engine driver: the boundary an engine's own server uses, as the engine machine calls it.

Requests arrive (:meth:`EngineDriver.submit`), the engine's scheduler plans a batch
(:meth:`EngineDriver.step`), the model runs it (played by the suite) and its results come
back (:meth:`EngineDriver.report`). A driver only translates these calls into the
engine's own: it never decides what runs, what is preempted, what hits the prefix cache or
what is evicted, so the engine's scheduler makes every decision it makes in production.

What a driver offers beyond that is **declared** in :attr:`EngineDriver.capabilities`
(names from :data:`CAPABILITIES`): the machine draws only what the driver can call, reads
only what it shows, and a property it cannot judge for want of data is reported as not
checked, never as passed.

Blocks are named by id; block 0 is the null block (never handed out), so a setup of
``num_blocks`` blocks has ``num_blocks - 1`` for requests, as in the pool's vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from kvpool.spec.events import Event

#: What a driver may declare it offers: name -> what the machine then does with it.
CAPABILITIES = MappingProxyType(
    {
        "tables": "each scheduled request in step()'s batch carries its block tables: the "
        "block-level properties (append-only, own-contents) are judged on them",
        "abort": "abort(request_id): a client gives up on a request, waiting or running "
        "(drawn at any point)",
        "events": "drain_events() -> list of kvpool.spec.events Event: the KV events "
        "published since the last call, judged by the events level's consumer model",
        "event_parents": "event_parents() -> EventParents: the chain the engine's cache "
        "holds, every page it holds under the hash its events give it, (group, hash) -> the "
        "hash of the page before it in its sequence (None for a first page); read after each "
        "drain_events(), events-parent-chain judges each stored page's named parent on it "
        "(with events)",
        "free_count": "free_count() -> int: the blocks free for new requests "
        "(idle-pool-free is judged on it)",
        "ref_counts": "ref_counts() -> tuple[int, ...]: every block's holder count, by id "
        "(refcounts-match-tables is judged on it)",
        "flush": "flush() -> bool: drop the prefix cache (reset_prefix_cache); drawn while "
        "no request is live",
        "swaps_in_cached": "a declaration, no call: the engine may replace a computed "
        "table entry with another block holding the same prefix (it deduplicates a block "
        "it publishes onto the cached one, and may then copy that one to write on); "
        "append-only lets exactly that pass, the new block's writer, by the suite's record, "
        "having agreed with the request in the salt and every token up to the entry's end "
        "(or the computed boundary)",
        "keys_within_pass": "a declaration, no call: the engine keys a block when it "
        "schedules it, so another request started in the same batch may hit it before the "
        "batch's forward pass writes it (each layer stores its KV before it attends); "
        "write-guard lets exactly that write pass: a block whose every other holder is a "
        "request this batch started (own-contents still judges what each of them reads)",
        "drops_results": "dropped() -> tuple of request ids, called after each report(): "
        "the requests whose result the engine dropped (it preempted them while the batch "
        "ran): their sampled token and stop never reach the client, which keeps waiting",
        "plans_ahead": "a declaration, no call: the engine plans the next batch before the "
        "last one's results are in (it prefetches), so between report() and the next step() "
        "its tables and ref counts already hold that plan: refcounts-match-tables is judged "
        "after each batch's writes, before report(), and idle-pool-free only while no "
        "request is live",
        "salts": "the engine takes a request's cache salt (Submission.salt) and partitions "
        "its prefix cache by it; without it every request is drawn without a salt",
    }
)


#: The capabilities that let the machine read what the engine shows, with the driver method
#: each reads it by (those of the actions it draws are the action table's:
#: :data:`~.operations.ENGINE_OPERATIONS`).
READ_CALLS = MappingProxyType(
    {
        "events": "drain_events",
        "free_count": "free_count",
        "ref_counts": "ref_counts",
        "drops_results": "dropped",
        "event_parents": "event_parents",
    }
)


@dataclass(frozen=True)
class EngineSetup:
    """How one engine test case is built: the engine's KV cache and its batch budget."""

    #: Blocks of the KV cache, the null block (id 0) included.
    num_blocks: int
    #: Tokens per block (the prefix cache's granularity too).
    block_size: int
    #: Most tokens one batch computes.
    max_batch_tokens: int = 32
    #: Most requests one batch runs.
    max_batch_size: int = 4
    #: Whether the prefix cache is on.
    enable_caching: bool = True
    #: Whether the engine publishes KV events (the machine turns it on for a driver
    #: declaring ``events``).
    enable_kv_cache_events: bool = False


@dataclass(frozen=True)
class Submission:
    """A request as a client sends it: its prompt, its cache salt, how many tokens it may
    generate (the model stops it then, or earlier)."""

    request_id: str
    prompt: tuple[int, ...]
    salt: str | None = None
    max_new_tokens: int = 4


@dataclass(frozen=True)
class ScheduledRequest:
    """One request of a planned batch: the engine computes its tokens ``start`` to
    ``start + num_tokens - 1`` (its prompt followed by the tokens sampled so far).

    For a request the batch starts (new, or resumed after preemption) ``start`` is the
    prefix the engine found in its cache: the hit it granted. ``tables`` (with the
    ``tables`` capability) are its block tables, one per KV-cache group, as this step's
    forward pass reads and writes them."""

    request_id: str
    start: int
    num_tokens: int
    tables: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True)
class Batch:
    """What the engine's scheduler planned for one step."""

    scheduled: tuple[ScheduledRequest, ...] = ()
    #: Requests it preempted: their blocks are given back, their computed tokens lost
    #: (what stays cached may serve them when they are scheduled again).
    preempted: tuple[str, ...] = ()
    #: Block copies the model makes before the forward pass (source, destination): a
    #: scheduled request whose table entry moves from the source to the destination moves
    #: with its data (the engine's copy-on-write), which ``append-only`` lets pass.
    copies: tuple[tuple[int, int], ...] = ()
    #: Blocks the model clears after the copies, before the forward pass (their old data
    #: is gone; a block both copied from and cleared is copied first).
    zeroed: tuple[int, ...] = ()
    #: Requests the engine ended on its own (refused, aborted): gone, blocks freed.
    ended: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sampled:
    """The model's result for one request whose step reached the end of its tokens: the
    token sampled, and whether it is a stop (end of sequence, or its last allowed)."""

    request_id: str
    token: int
    stop: bool


@runtime_checkable
class EngineDriver(Protocol):
    """An engine under test, driven through its scheduler (see the module docstring).

    Optional methods (:data:`CAPABILITIES`) are called only when declared."""

    #: A short name for tables and traces.
    name: str
    #: What it offers beyond submit/step/report: names from :data:`CAPABILITIES`.
    capabilities: frozenset[str]

    def submit(self, request: Submission) -> None:
        """A request arrives; it waits until the scheduler plans it."""
        ...

    def step(self) -> Batch:
        """The scheduler plans the next batch (the model runs it before :meth:`report`)."""
        ...

    def report(self, results: Sequence[Sampled]) -> None:
        """The model ran the batch: every request it sampled for, with the token and
        whether it stopped (a stopped request is finished and its blocks freed)."""
        ...


#: The chain an engine's cache holds (``event_parents``): ``(group, hash)`` of every page
#: it holds, under the hash its KV events give it -> the hash of the page before it in its
#: sequence, ``None`` for a sequence's first page.
EventParents = Mapping[tuple[int, bytes], bytes | None]


#: Builds a fresh engine for one test case.
EngineDriverFactory = Callable[[EngineSetup], EngineDriver]


class DriverError(Exception):
    """A driver that does not offer what it declares (a usage error, never a finding)."""


def drained(driver: EngineDriver) -> list[Event]:
    """The events ``driver`` published since the last call (none without ``events``)."""
    if "events" not in driver.capabilities:
        return []
    take: Callable[[], list[Event]] = getattr(driver, "drain_events")  # noqa: B009
    return list(take())


def event_parents(driver: EngineDriver) -> EventParents | None:
    """The chain ``driver``'s cache holds now (``None`` without ``event_parents``)."""
    if "event_parents" not in driver.capabilities:
        return None
    read: Callable[[], EventParents] = getattr(driver, "event_parents")  # noqa: B009
    return read()


def close(driver: EngineDriver) -> None:
    """Let ``driver`` release what it holds, if it has a ``close``."""
    closing = getattr(driver, "close", None)
    if callable(closing):
        closing()
