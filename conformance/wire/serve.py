"""A Python target served over the wire protocol: the other end of ``exec:``.

    python -m kvpool.conformance.wire.serve impl

reads the suite's messages on stdin and answers each on stdout, driving the target the
argument names (any ``--target`` text: ``impl``, ``spec``, ``module:factory``). It is how
``kvpool bench`` measures the protocol against the same pool in process, and a working
example of the program side. The target is the one its command line names: nothing a
message says is ever loaded.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from kvpool.spec import PoolConfig, get_profile

from ..engine.target import Target, TargetFactory
from ..trace.itf import ItfError, decode
from .codec import decode_action, encode_outcome, encode_view
from .session import PROTOCOL


class Server:
    """Answers one message at a time for the target ``factory`` builds."""

    def __init__(self, factory: TargetFactory, profile: str) -> None:
        self.factory = factory
        self.default_profile = profile
        self.target: Target | None = None

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
            "operations": sorted(target.operations),
            "observes": sorted(target.observes),
            "view": encode_view(target.view()),
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
            "view": encode_view(self.target.view()),
        }
        if "structure" in self.target.observes:
            reply["structure_problems"] = self.target.structure_problems()
        return reply


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
