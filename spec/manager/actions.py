"""What a scheduler asks of its KV cache manager, one request at a time, as frozen values.

Like the pool's actions these print, store in traces and replay. ``Compute`` stands for one
forward pass over the request's pending tokens: the engine copies and writes KV into the
request's blocks, then the manager registers what became cacheable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .extra_keys import NO_EXTRA, ExtraKeys
from .report import INCREMENTAL

#: Field metadata: a trace leaves the field out while it holds its default (so traces
#: written before the field existed read back, and keep their bytes).
OMIT_DEFAULT = {"itf": "omit-default"}
#: As :data:`OMIT_DEFAULT`, and a one-line listing of the action leaves it out too (a
#: field added after the listings in the docs were recorded).
OMIT_DEFAULT_LISTED = {"itf": "omit-default", "listed": "omit-default"}


@dataclass(frozen=True)
class RequestAction:
    """Base of every request-level action; ``operation`` names it in tables and traces."""

    operation: ClassVar[str] = ""
    request_id: str


@dataclass(frozen=True)
class Admit(RequestAction):
    """A new request arrives: find its cached prefix, touch every hit, allocate the rest.

    ``salt`` (a ``cache_salt``) and ``extra`` (LoRA adapter, multimodal features, prompt
    embeddings) go into the block hashes as extra keys: a request that differs in one of
    them never shares a block over which it differs. ``report_mode`` (``"incremental"``
    or ``"full"``, see :mod:`.report`) says whether its prefix-cache hits are published
    again whenever it is looked up.
    """

    operation: ClassVar[str] = "admit"
    tokens: tuple[int, ...]
    salt: str | None = None
    extra: ExtraKeys = field(default=NO_EXTRA, metadata=OMIT_DEFAULT)
    report_mode: str = field(default=INCREMENTAL, metadata=OMIT_DEFAULT_LISTED)


@dataclass(frozen=True)
class Append(RequestAction):
    """A running request grows by ``tokens`` (decoded output): allocate slots for them."""

    operation: ClassVar[str] = "append"
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class Compute(RequestAction):
    """One forward pass: copy-on-write where needed, write the pending tokens' KV, then
    register the full blocks (and, with ``cache_partial``, the tail as a partial entry)."""

    operation: ClassVar[str] = "compute"
    cache_partial: bool = False


@dataclass(frozen=True)
class Preempt(RequestAction):
    """Take a running request off the device: free its blocks, keep its tokens."""

    operation: ClassVar[str] = "preempt"


@dataclass(frozen=True)
class Resume(RequestAction):
    """Schedule a preempted request again, from its cached prefix like a new one."""

    operation: ClassVar[str] = "resume"


@dataclass(frozen=True)
class Finish(RequestAction):
    """The request is done (or aborted): free its blocks, tail first, and forget it."""

    operation: ClassVar[str] = "finish"


@dataclass(frozen=True)
class ResetCache(RequestAction):
    """``reset_prefix_cache()`` through the manager (``request_id`` is unused, ``""``)."""

    operation: ClassVar[str] = "reset_cache"
    request_id: str = ""


@dataclass(frozen=True)
class EvictCached(RequestAction):
    """Cached blocks no request holds leave the prefix cache (``evict_blocks``: a KV
    connector found their data invalid, or an operator drops them); nothing is freed. A
    later block of the same prefix may stay cached: a lookup must stop at the first miss.
    ``request_id`` is unused (``""``)."""

    operation: ClassVar[str] = "evict_cached"
    block_ids: tuple[int, ...] = ()
    request_id: str = ""


REQUEST_ACTIONS: tuple[type[RequestAction], ...] = (
    Admit,
    Append,
    Compute,
    Preempt,
    Resume,
    Finish,
    ResetCache,
    EvictCached,
)

REQUEST_ACTIONS_BY_OPERATION: dict[str, type[RequestAction]] = {
    a.operation: a for a in REQUEST_ACTIONS
}
