"""A Python target served over the wire protocol: the other end of ``exec:``.

    python -m kvpool.conformance.wire.serve impl

reads the suite's messages on stdin and answers each on stdout, driving the target the
argument names (any ``--target`` text: ``impl``, ``spec``, ``module:factory``) and, for a
manager's ``init``, its own manager (``--manager MANAGER``: any ``--manager`` text). It is how
``kvpool bench`` measures the protocol against the same pool in process, and a working
example of the program side. The target is the one its command line names: nothing a
message says is ever loaded.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from functools import lru_cache
from typing import Any, TextIO

from kvpool.spec import PoolConfig, get_profile

from ..machines.pool.target import EVICT_FIRST, TAKES, Target, TargetFactory
from ..machines.requests.target import ManagerTarget, ManagerTargetFactory, RequestSetup
from ..trace.itf import ItfError, decode, hints_of
from .child import LINE
from .codec import (
    ViewWriter,
    decode_action,
    encode_outcome,
    encode_returned,
    optional_arguments,
    pool_actions,
    shown_type,
)
from .manager import MANAGER_METHODS, MANAGER_OFFERS, decode_arguments, signature
from .session import BATCHES, PROTOCOL, PROTOCOLS


class Server:
    """Answers one message at a time for the target ``factory`` builds (a pool ``init``)
    and the manager ``managers`` builds (a manager ``init``), if any."""

    def __init__(
        self, factory: TargetFactory, profile: str, managers: ManagerTargetFactory | None = None
    ) -> None:
        self.factory = factory
        self.managers = managers
        self.default_profile = profile
        #: What the latest ``init`` built: a pool or a manager (the other ``None``).
        self.pool: Target | None = None
        self.manager: ManagerTarget | None = None
        self.views = ViewWriter()
        #: The protocol version agreed in the latest ``init``.
        self.protocol = 1
        #: :func:`taken_arguments` of the pools built so far, by class, operations, config
        #: and profile.
        self.taken: dict[tuple[type, frozenset[str], PoolConfig, str], frozenset[str]] = {}

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        kind, message_id = message.get("type"), message.get("id")
        try:
            if kind == "init":
                body = self.init(message)
            elif kind == "apply":
                body = self.apply(message)
            elif kind == "batch" and self.protocol >= BATCHES:
                body = self.batch(message)
            elif kind == "call":
                body = self.call(message)
            else:
                raise ItfError(f"unknown message type {kind!r}")
        except (ItfError, KeyError, ValueError) as exc:
            return {"type": "error", "in_reply_to": message_id, "text": str(exc)}
        return {"in_reply_to": message_id, **body}

    def init(self, message: dict[str, Any]) -> dict[str, Any]:
        config = decoded_config(json.dumps(message["config"], sort_keys=True))
        asked = message["protocol"]
        if not isinstance(asked, int) or asked < min(PROTOCOLS):
            raise ItfError(f"protocol {asked!r}: this program speaks protocols {PROTOCOLS}")
        self.protocol = min(asked, PROTOCOL)
        profile = get_profile(message["profile"] or self.default_profile)
        if isinstance(config, RequestSetup):
            if self.managers is None:
                raise ItfError("this program serves no manager")
            self.pool, self.manager = None, self.managers(config, profile)
            operations = {name for name in MANAGER_OFFERS if _offers(self.manager, name)}
            shown: Target | ManagerTarget = self.manager
        else:
            self.pool, self.manager = self.factory(config, profile), None
            # the same config builds the same pool: its arguments asked once
            key = (type(self.pool), self.pool.operations, config, profile.name)
            taken = self.taken.get(key)
            if taken is None:
                taken = self.taken[key] = taken_arguments(self.pool)
            operations = set(self.pool.operations | taken)
            shown = self.pool
        self.views.restart(self.protocol >= BATCHES)
        return {
            "type": "init_ok",
            "protocol": self.protocol,
            "name": f"served {shown.name}",
            "profile": self.default_profile,
            "operations": sorted(operations),
            "observes": sorted(shown.observes),
            "view": self.views.write(shown.view()),
        }

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        manager, method = self.manager, message["method"]
        if manager is None or method not in MANAGER_METHODS:
            raise ItfError(f"no manager method {method!r} to call")
        arguments = decode_arguments(method, message["arguments"])
        try:
            result: Any = getattr(manager, method)(**arguments)
        except Exception as exc:  # the manager refused the call: its answer, sent back
            result = exc
        return {
            "type": "returned",
            "outcome": encode_returned(result, signature(method)["return"]),
            "view": self.views.write(manager.view()),
        }

    def batch(self, message: dict[str, Any]) -> dict[str, Any]:
        actions = message["actions"]
        if not isinstance(actions, list):
            raise ItfError("actions: expected a list of actions")
        steps = [self.step(action) for action in actions]
        return {"type": "applied_batch", "steps": steps}

    def apply(self, message: dict[str, Any]) -> dict[str, Any]:
        return {"type": "applied", **self.step(message["action"])}

    def step(self, data: Any) -> dict[str, Any]:
        """Apply the action ``data`` records: its outcome, the view after it and, where
        the pool shows its structure, the problems found in it."""
        pool = self.pool
        if pool is None:
            raise ItfError("apply without a pool: init one first")
        action = decode_action(data)
        try:
            outcome: Any = pool.apply(action)
        except Exception as exc:  # the pool refused the action: its answer, sent back
            outcome = exc
        reply = {
            "outcome": encode_outcome(action, outcome),
            "view": self.views.write(pool.view()),
        }
        if "structure" in pool.observes:
            reply["structure_problems"] = pool.structure_problems()
        return reply


@lru_cache(maxsize=256)
def decoded_config(text: str) -> PoolConfig | RequestSetup:
    """The config an ``init`` carries (as JSON ``text``), read once per config: a replay of
    many traces starts many pools of a few configs."""
    config: PoolConfig | RequestSetup = decode(
        json.loads(text), PoolConfig | RequestSetup, "config"
    )
    return config


def _offers(manager: ManagerTarget, name: str) -> bool:
    """Whether ``manager`` offers ``name`` (of :data:`.manager.MANAGER_OFFERS`)."""
    if name == "admit:extra":
        return bool(getattr(manager, "extra_keys_taken", frozenset()))
    if name == "admit:report_mode":
        return bool(getattr(manager, "report_modes_taken", frozenset()))
    return callable(getattr(manager, name, None))


def taken_arguments(target: Target) -> frozenset[str]:
    """``OPERATION:FIELD`` for every optional argument (a field defaulting to ``None`` or
    ``False``) of the target's operations that its ``takes`` accepts, asked with an action
    of zero values setting only that field (``free_blocks:evict_first`` is an operation
    of its own, which the target lists or not)."""
    takes = getattr(target, TAKES, None)
    taken = set()
    for kind in pool_actions():
        if kind.operation not in target.operations:
            continue
        hints = hints_of(kind)
        zero = {
            f.name: zero_of(hints[f.name])
            for f in dataclasses.fields(kind)
            if f.default is dataclasses.MISSING
        }
        for name in optional_arguments(kind):
            argument = f"{kind.operation}:{name}"
            probe = kind(**{**zero, name: zero_of(shown_type(hints[name]), set_=True)})
            if argument != EVICT_FIRST and (takes is None or takes(probe)):
                taken.add(argument)
    return frozenset(taken)


def zero_of(hint: Any, set_: bool = False) -> Any:
    """The plainest value of type ``hint`` (``True`` for a flag being set)."""
    if hint is bool:
        return set_
    if hint in (int, float, str, bytes):
        return hint()
    return ()  # a tuple: every sequence field of an action is one


def serve(server: Server, source: TextIO, sink: TextIO) -> None:
    """Answer every line of ``source`` on ``sink`` until the end of input."""
    for line in source:
        try:
            message = json.loads(line)
        except ValueError as exc:
            message = {"type": f"not JSON: {exc}"}
        reply = server.answer(message if isinstance(message, dict) else {})
        sink.write(LINE.encode(reply) + "\n")
        sink.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    manager = "auto"
    if len(args) == 3 and args[1] == "--manager":
        manager = args[2]
    elif len(args) != 1:
        print(
            "usage: python -m kvpool.conformance.wire.serve TARGET [--manager MANAGER]",
            file=sys.stderr,
        )
        return 2
    from ..targets.loading import TargetLoadError, choose_profile, load_manager, load_target

    try:
        factory, _ = load_target(args[0])
        managers, _ = load_manager(manager, args[0])
        profile = choose_profile(args[0]).name
    except TargetLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    serve(Server(factory, profile, managers), sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
