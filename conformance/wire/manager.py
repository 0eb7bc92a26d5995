"""A program as a KV cache manager (``--manager exec:CMD ARGS...``): each method of the
:class:`~..manager.target.ManagerTarget` protocol is one ``call`` message.

A call names the method and carries its arguments by name, each the ITF value of the type
the protocol's signature gives it; the program answers ``returned`` with the outcome (the
ITF value of the method's return type, or a refusal) and its pool's view. Nothing here
knows one method from another: arguments and results are encoded from the protocol's
signatures, so the request machine drives a program exactly as it drives a Python manager.

The program says in its handshake what it offers beyond the protocol's methods:
``take_events`` (its pool's KV events, compared with the spec's), ``admit:extra`` (it
takes a request's partitioning attributes besides its salt: LoRA, images, embeddings) and
``admit:report_mode`` (it takes a request in either KV-cache report mode).
"""

from __future__ import annotations

from functools import cache
from typing import Any, get_type_hints

from kvpool.spec import Event, Profile
from kvpool.spec.manager import (
    ALL_ATTRIBUTES,
    INCREMENTAL,
    NO_EXTRA,
    REPORT_MODES,
    ExtraKeys,
    Scheduled,
)

from ..machines.pool.target import PoolView
from ..machines.requests.target import ManagerTarget, RequestSetup
from ..trace.itf import Json, decode, encode
from .codec import Refusal
from .session import Session
from .target import WireRefusal

#: What a manager program may offer beyond the protocol's methods.
MANAGER_OFFERS = frozenset({"take_events", "admit:extra", "admit:report_mode"})
#: The methods a ``call`` may name: the manager protocol's (less the view and structure
#: problems, which every reply carries), and ``take_events``. Nothing else is ever called.
MANAGER_METHODS = frozenset(
    name
    for name in vars(ManagerTarget)
    if not name.startswith("_") and callable(getattr(ManagerTarget, name))
) - {"view", "structure_problems"} | {"take_events"}


@cache
def signature(method: str) -> dict[str, Any]:
    """The argument and return types of ``method``: :class:`ManagerTarget`'s, and those of
    what a manager may offer beyond it (:class:`WireManagerWithEvents`'s)."""
    owner = ManagerTarget if hasattr(ManagerTarget, method) else WireManagerWithEvents
    hints: dict[str, Any] = get_type_hints(getattr(owner, method))
    if method == "admit":  # the optional attributes, passed only where taken
        hints = {**hints, "extra": ExtraKeys, "report_mode": str}
    return hints


def encode_arguments(method: str, arguments: dict[str, Any]) -> dict[str, Json]:
    """``arguments`` of ``method``, each as the ITF value of its type."""
    hints = signature(method)
    return {name: encode(value, hints[name]) for name, value in arguments.items()}


def decode_arguments(method: str, data: dict[str, Json]) -> dict[str, Any]:
    """The arguments a ``call`` carries for ``method``."""
    hints = signature(method)
    return {name: decode(value, hints[name], f"arguments.{name}") for name, value in data.items()}


class WireManager:
    """One manager inside the program of ``session``."""

    def __init__(self, session: Session, setup: RequestSetup, profile: Profile) -> None:
        self.session = session
        hello, self.current = session.init(setup, profile.name, MANAGER_OFFERS)
        self.generation = session.generation
        self.name = hello.name
        self.observes = hello.observes
        self.offers = hello.operations
        self.extra_keys_taken = ALL_ATTRIBUTES if "admit:extra" in self.offers else frozenset()
        offered = "admit:report_mode" in self.offers
        self.report_modes_taken = frozenset(REPORT_MODES) if offered else frozenset()
        self.problems: tuple[str, ...] = ()

    def call(self, method: str, **arguments: Any) -> Any:
        """Call ``method`` in the program; its result (a refusal raised)."""
        self.session.check(self.generation)
        reply = self.session.call(method, encode_arguments(method, arguments), signature(method))
        self.current, self.problems = reply.view, reply.problems
        if isinstance(reply.outcome, Refusal):
            raise WireRefusal(method, str(reply.outcome))
        return reply.outcome

    def admit(
        self,
        request_id: str,
        tokens: tuple[int, ...],
        salt: str | None,
        extra: ExtraKeys = NO_EXTRA,
        report_mode: str = INCREMENTAL,
    ) -> Scheduled | None:
        taken: dict[str, Any] = {} if extra == NO_EXTRA else {"extra": extra}
        if report_mode != INCREMENTAL:
            taken["report_mode"] = report_mode
        result: Scheduled | None = self.call(
            "admit", request_id=request_id, tokens=tokens, salt=salt, **taken
        )
        return result

    def resume(self, request_id: str) -> Scheduled | None:
        result: Scheduled | None = self.call("resume", request_id=request_id)
        return result

    def append(self, request_id: str, tokens: tuple[int, ...]) -> Scheduled | None:
        result: Scheduled | None = self.call("append", request_id=request_id, tokens=tokens)
        return result

    def prepare_write(self, request_id: str) -> Scheduled | None:
        result: Scheduled | None = self.call("prepare_write", request_id=request_id)
        return result

    def copies_done(self, request_id: str) -> None:
        self.call("copies_done", request_id=request_id)

    def commit(self, request_id: str, cache_partial: bool) -> Scheduled:
        result: Scheduled = self.call("commit", request_id=request_id, cache_partial=cache_partial)
        return result

    def preempt(self, request_id: str) -> None:
        self.call("preempt", request_id=request_id)

    def finish(self, request_id: str) -> None:
        self.call("finish", request_id=request_id)

    def reset_prefix_cache(self) -> bool:
        result: bool = self.call("reset_prefix_cache")
        return result

    def evict_cached(self, block_ids: tuple[int, ...]) -> None:
        self.call("evict_cached", block_ids=block_ids)

    def is_block_writable(self, block: int) -> bool:
        result: bool = self.call("is_block_writable", block=block)
        return result

    def view(self) -> PoolView:
        self.session.check(self.generation)
        return self.current

    def structure_problems(self) -> list[str]:
        return list(self.problems)


class WireManagerWithEvents(WireManager):
    """A manager program that offers ``take_events``: its pool's KV events are judged."""

    def take_events(self) -> tuple[Event, ...] | None:
        result: tuple[Event, ...] | None = self.call("take_events")
        return result


class WireManagerFactory:
    """Builds each test case's manager in one running program (with ``take_events`` when
    the program offered it at its first ``init``)."""

    def __init__(self, session: Session, offers: frozenset[str]) -> None:
        self.session = session
        self.kind = WireManagerWithEvents if "take_events" in offers else WireManager

    def __call__(self, setup: RequestSetup, profile: Profile) -> ManagerTarget:
        return self.kind(self.session, setup, profile)
