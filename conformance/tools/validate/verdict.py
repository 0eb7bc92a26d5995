"""One validation: the spec's manager replays the log's requests, and after each one the
engine's stream (its window of the recording) is judged against the spec's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvpool.spec import Profile

from .engine_side import feed, windows
from .judge import Difference, compare, hit_difference
from .ledger import Ledger
from .request_log import RequestLog
from .spec_side import SpecReplay


@dataclass(frozen=True)
class Verdict:
    """What a validation found, and what it compared."""

    difference: Difference | None
    #: Requests replayed (up to the difference, or all).
    requests: int
    #: Whether the log's ``sent`` times cut the stream per request (else it is judged once).
    per_request: bool
    spec_stores: int
    engine_stores: int
    spec_removals: int
    engine_removals: int


def validate(log: RequestLog, recording: Path, profile: Profile) -> Verdict:
    """Judge the stream recorded at ``recording`` against the spec's replay of ``log``."""
    cut, per_request = windows(recording, log)
    replay = SpecReplay(log, profile)
    spec, engine = Ledger(), Ledger()
    found: Difference | None = None
    ran = 0
    last = len(log.requests) - 1
    for index, (request, window) in enumerate(zip(log.requests, cut, strict=True)):
        ran = index + 1
        done = replay.run(request)
        replay.feed(spec, done.events)
        engine.problems.extend(window.problems)
        feed(engine, window.events, log.block_size)
        if per_request or index == last:
            kind = compare(
                spec, engine, log.block_size, (done.cached_tokens, request.cached_tokens)
            )
        else:
            kind = hit_difference(done.cached_tokens, request.cached_tokens)
        if kind is not None:
            found = Difference(kind[0], index, request.request_id, kind[1])
            break
    return Verdict(
        found,
        ran,
        per_request,
        sum(spec.stores.values()),
        sum(engine.stores.values()),
        sum(spec.removals.values()),
        sum(engine.removals.values()),
    )
