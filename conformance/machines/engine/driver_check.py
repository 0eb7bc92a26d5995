"""A driver checked once, before any test case, against the driver protocol
(:mod:`.driver`) and the capabilities the machine's actions need (:mod:`.operations`)."""

from __future__ import annotations

from . import driver as protocol
from .operations import capability_calls


def driver_problems(driver: object) -> list[str]:
    """What ``driver`` lacks of the protocol and of what it declares, in words (empty:
    nothing): checked once, before any test case, so that a misspelt method or a
    capability without its call is a usage error naming it, not a crash mid-run."""
    problems = [f"no {name!r}" for name in ("name", "capabilities") if not hasattr(driver, name)]
    problems += [
        f"no method {name}()"
        for name in ("submit", "step", "report")
        if not callable(getattr(driver, name, None))
    ]
    declared: frozenset[str] = frozenset(getattr(driver, "capabilities", ()))
    unknown = sorted(set(declared) - set(protocol.CAPABILITIES))
    if unknown:
        problems.append(f"unknown capabilities {unknown} (known: {sorted(protocol.CAPABILITIES)})")
    calls = {**capability_calls(), **protocol.READ_CALLS}
    problems += [
        f"declares {cap!r} but has no method {method}()"
        for cap, method in calls.items()
        if cap in declared and not callable(getattr(driver, method, None))
    ]
    if "event_parents" in declared and "events" not in declared:
        problems.append("declares 'event_parents' without 'events' (the chain judges events)")
    return problems
