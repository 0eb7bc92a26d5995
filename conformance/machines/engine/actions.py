"""The engine machine's actions: what the clients and the model do around an engine.

Actions are data, as at every machine: a drawn test case, a shrunk one and a replayed
trace are the same list of these. The engine's own decisions (what a batch runs, what
is preempted, what hits the cache) are not actions: its scheduler makes them anew on
every replay.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arrive:
    """A client sends a request (a new one, or the next turn of a session: the previous
    turn's prompt and answer, then the new message)."""

    request_id: str
    prompt: tuple[int, ...]
    salt: str | None = None
    max_new_tokens: int = 4
    operation: str = "arrive"


@dataclass(frozen=True)
class Abort:
    """A client gives up on a request, waiting or running."""

    request_id: str
    operation: str = "abort"


@dataclass(frozen=True)
class RunStep:
    """The engine plans a batch and the model runs it: each request whose step reaches the
    end of its tokens samples one (:func:`model_token`); it stops there if it is named in
    ``stops`` (an end-of-sequence token) or reached its ``max_new_tokens``."""

    stops: tuple[str, ...] = ()
    operation: str = "step"


@dataclass(frozen=True)
class Flush:
    """The operator drops the prefix cache (``reset_prefix_cache``)."""

    operation: str = "flush"


EngineAction = Arrive | Abort | RunStep | Flush
ENGINE_ACTIONS = (Arrive, Abort, RunStep, Flush)


def model_token(tokens: tuple[int, ...]) -> int:
    """The token the model samples after ``tokens``: a fixed function of them, so that a
    replay samples the same, drawn from a small vocabulary so that prompts and answers
    share prefixes often."""
    return 1 + (len(tokens) + 3 * sum(tokens[-3:])) % 4
