"""A Python target served over the wire protocol: the other end of ``exec:``.

    python -m kvpool.conformance.wire.serve impl

reads the suite's messages on stdin and answers each on stdout, driving the target the
argument names (any ``--target`` text: ``impl``, ``spec``, ``module:factory``). It is how
``kvpool bench`` measures the protocol against the same pool in process, and a working
example of the program side. The target is the one its command line names: nothing a
message says is ever loaded.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, TextIO

from kvpool.spec import ALL_ACTIONS, PoolConfig, get_profile

from ..engine.target import EVICT_FIRST, TAKES, Target, TargetFactory
from ..trace.itf import ItfError, decode, hints_of
from .codec import (
    ViewWriter,
    decode_action,
    encode_outcome,
    optional_arguments,
    shown_type,
)
from .session import PROTOCOL


class Server:
    """Answers one message at a time for the target ``factory`` builds."""

    def __init__(self, factory: TargetFactory, profile: str) -> None:
        self.factory = factory
        self.default_profile = profile
        self.target: Target | None = None
        self.views = ViewWriter()

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        kind, message_id = message.get("type"), message.get("id")
        try:
            if kind == "init":
                body = self.init(message)
            elif kind == "apply":
                body = self.apply(message)
            else:
                raise ItfError(f"unknown message type {kind!r}")
        except (ItfError, KeyError, ValueError) as exc:
            return {"type": "error", "in_reply_to": message_id, "text": str(exc)}
        return {"in_reply_to": message_id, **body}

    def init(self, message: dict[str, Any]) -> dict[str, Any]:
        config = decode(message["config"], PoolConfig, "config")
        profile = get_profile(message["profile"] or self.default_profile)
        self.target = target = self.factory(config, profile)
        return {
            "type": "init_ok",
            "protocol": PROTOCOL,
            "name": f"served {target.name}",
            "profile": self.default_profile,
            "operations": sorted(target.operations | taken_arguments(target)),
            "observes": sorted(target.observes),
            "view": self.views.write(target.view()),
        }

    def apply(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.target is None:
            raise ItfError("apply before init")
        action = decode_action(message["action"])
        try:
            outcome: Any = self.target.apply(action)
        except Exception as exc:  # the pool refused the action: its answer, sent back
            outcome = exc
        reply = {
            "type": "applied",
            "outcome": encode_outcome(action, outcome),
            "view": self.views.write(self.target.view()),
        }
        if "structure" in self.target.observes:
            reply["structure_problems"] = self.target.structure_problems()
        return reply


def taken_arguments(target: Target) -> frozenset[str]:
    """``OPERATION:FIELD`` for every optional argument (a field defaulting to ``None`` or
    ``False``) of the target's operations that its ``takes`` accepts, asked with an action
    of zero values setting only that field (``free_blocks:evict_first`` is an operation
    of its own, which the target lists or not)."""
    takes = getattr(target, TAKES, None)
    taken = set()
    for kind in ALL_ACTIONS:
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
        sink.write(json.dumps(reply, separators=(",", ":")) + "\n")
        sink.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m kvpool.conformance.wire.serve TARGET", file=sys.stderr)
        return 2
    from ..targets.loading import TargetLoadError, choose_profile, load_target

    try:
        factory, _ = load_target(args[0])
        profile = choose_profile(args[0]).name
    except TargetLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    serve(Server(factory, profile), sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
