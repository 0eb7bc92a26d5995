"""Recording a diff trace: pool A and pool B replayed step by step, for a trace file.

Each step keeps A's outcome (the trace's ``expected`` column), B's outcome (``actual``),
the verdict, and what A shows of its state afterwards (free queue, ref counts, keys), so
``kvpool show`` renders a diff trace like any other and ``kvpool replay`` re-runs A
against B.
"""

from __future__ import annotations

from kvpool.spec import NULL_BLOCK, Action, PoolConfig

from ...machines.pool.levels import LEVELS
from ...machines.pool.target import PoolView
from ...trace.itf import Json
from ...trace.model import Trace, TraceStep
from ...trace.outcomes import outcome_json
from .loading import load_pair
from .pair import Difference, PairRun


def view_json(view: PoolView) -> dict[str, Json]:
    """What a pool shows, in the shape of a trace state (only what it shows)."""
    state: dict[str, Json] = {}
    if view.free_queue is not None:
        state["free_queue"] = list(view.free_queue)
    if view.ref_cnt is not None:
        state["ref_cnt"] = {
            "#map": [[b, n] for b, n in enumerate(view.ref_cnt) if n and b != NULL_BLOCK]
        }
    if view.keys is not None:
        state["keys"] = {
            "#map": [
                [b, {"#set": sorted(k.hex() for k in keys)}]
                for b, keys in enumerate(view.keys)
                if keys
            ]
        }
    return state


def record_pair(trace: Trace, target: str | None = None, versus: str | None = None) -> Trace:
    """Replay ``trace``'s actions on fresh pools A (its own target, or ``target``) and B
    (its own, or ``versus``), and return it with every step recorded, up to and including
    the first difference."""
    meta = trace.meta
    assert meta.versus is not None, "not a diff trace"
    config = meta.config
    assert isinstance(config, PoolConfig)
    pair = load_pair(
        target or meta.target, versus or meta.versus, meta.profile, meta.versus_profile
    )
    try:
        run = PairRun(pair, LEVELS[meta.level], config)
    except Difference as exc:  # the pools differ before any action
        raise ValueError(f"the two pools differ as built: {exc}") from exc
    initial = view_json(run.a.view())
    steps = []
    for action in trace.actions:
        assert isinstance(action, Action)
        if run.parted is not None:
            break
        verdict = "ok"
        try:
            run.apply(action)
        except Difference as exc:
            verdict = str(exc)
        except Exception as exc:  # an adapter or the spec's copy of A failed
            verdict = f"{type(exc).__name__}: {exc}"
        expected = outcome_json(action, run.last.a)
        actual = outcome_json(action, run.last.b)
        steps.append(TraceStep(action, expected, actual, verdict, view_json(run.a.view())))
        if verdict != "ok":
            break
    return Trace(meta, trace.actions, tuple(steps), initial)
