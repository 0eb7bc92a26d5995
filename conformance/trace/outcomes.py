"""A step's values as ITF JSON: what a side made of an action (a result, a refusal, an
exception, or nothing) and the spec's state after it."""

from __future__ import annotations

from typing import Any

from kvpool.spec import ContractViolation, Event, Observation, PoolState, TakeEvents
from kvpool.spec.manager import ManagerState, Scheduled

from .itf import Json, encode

NOTHING: Json = {"#tup": []}


def variant(tag: str, value: Json = NOTHING) -> Json:
    return {"tag": tag, "value": value}


def result_json(action: Any, result: Any) -> Json:
    """A pool result as a tagged ITF value."""
    if result is None:
        return variant("Nothing")
    if isinstance(result, bool):
        return variant("Bool", result)
    if isinstance(result, int):
        return variant("Int", result)
    if isinstance(result, float):
        return variant("Usage", encode(result, float))
    if isinstance(result, bytes):
        return variant("Key", result.hex())
    if isinstance(action, TakeEvents):
        return variant("Events", encode(tuple(result), tuple[Event, ...]))
    return variant("Blocks", [int(b) for b in result])


class NotOffered(Exception):
    """The outcome of a side of a diff whose pool lacks the call: it was not called."""


def outcome_json(action: Any, outcome: Any) -> Json:
    """What one side made of an action: a result, a refusal, an exception, a call its pool
    lacks, or nothing."""
    if isinstance(outcome, NotOffered):
        return variant("Lacks", str(outcome))
    if isinstance(outcome, Observation):
        fired = [{"#tup": [b, name]} for b, name in outcome.fired]
        return variant("Returned", {"result": result_json(action, outcome.result), "fired": fired})
    if isinstance(outcome, ContractViolation):
        return variant("Refused", f"{outcome.rule}: {outcome}")
    if isinstance(outcome, Exception):
        return variant("Raised", f"{type(outcome).__name__}: {outcome}")
    if isinstance(outcome, Scheduled):
        return variant("Scheduled", encode(outcome, Scheduled))
    if isinstance(outcome, bool):
        return variant("Bool", outcome)
    return variant("Nothing")


def state_json(pool: PoolState, manager: ManagerState | None = None) -> dict[str, Json]:
    """The spec's state: free queue, the nonzero ref counts, every block's keys, tables."""
    state: dict[str, Json] = {
        "free_queue": list(pool.free_queue),
        "ref_cnt": {"#map": [[b, n] for b, n in enumerate(pool.ref_cnt) if n]},
        "keys": {
            "#map": [
                [b, {"#set": sorted(k.hex() for k in pool.keys_of(b))}]
                for b in range(pool.num_blocks)
                if pool.keys_of(b)
            ]
        },
    }
    if manager is not None:
        state["tables"] = {
            "#map": [
                [rid, [list(t) for t in r.tables]] for rid, r in sorted(manager.requests.items())
            ]
        }
    return state
