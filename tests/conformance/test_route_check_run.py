"""route-check starts each consumer once per run and empties it between scenarios as it
declares (its ``resets`` hook): a clear on the stream, in process and on the wire, or a
new start; a router that ignores the clear is caught over-claiming in the next scenario."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import docs_written_router  # pytest puts this folder on sys.path
import docs_written_wire_router
import pytest
from kvpool.conformance.consumers.naming import parse_consumer
from kvpool.conformance.tools.routes.scenarios import Setting, run_scenarios

PLUGIN = "docs_written_router:make_router"
WIRE_PLUGIN = "docs_written_wire_router:WireCopiesRouter"
#: The same seed in both: the second scenario asks about the first one's prompts.
SCENARIOS = ["clean", "twins"]


def counted(monkeypatch: pytest.MonkeyPatch, cls: type, calls: Counter[str]) -> None:
    """``cls``'s start and close, counted in ``calls`` by the router's name."""
    start, close = cls.start, getattr(cls, "close", lambda self: None)  # type: ignore[attr-defined]

    def counting_start(self: object, wire: object) -> None:
        calls[f"{self.name} start"] += 1  # type: ignore[attr-defined]
        start(self, wire)

    def counting_close(self: object) -> None:
        calls[f"{self.name} close"] += 1  # type: ignore[attr-defined]
        close(self)

    monkeypatch.setattr(cls, "start", counting_start)
    monkeypatch.setattr(cls, "close", counting_close, raising=False)


def run(consumers: tuple[str, ...]) -> dict[str, list[tuple[int, int, int]]]:
    for name in consumers:
        parse_consumer(name)
    results = run_scenarios(SCENARIOS, Setting("impl", "0.33.0", consumers, requests=8))
    return {
        name: [(r.tallies[name].held, r.tallies[name].found, r.tallies[name].claimed)
               for r in results]
        for name in consumers
    }  # fmt: skip


def test_consumers_start_once_and_are_cleared_through_the_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: Counter[str] = Counter()
    counted(monkeypatch, docs_written_router.CopiesRouter, calls)
    counted(monkeypatch, docs_written_wire_router.WireCopiesRouter, calls)
    figures = run((PLUGIN, WIRE_PLUGIN))
    assert calls == {
        "copies-router start": 1, "copies-router close": 1,
        "wire-copies-router start": 1, "wire-copies-router close": 1,
    }  # fmt: skip
    for name, scenarios in figures.items():
        for held, found, claimed in scenarios:
            assert held > 0 and found == held == claimed, (name, scenarios)


def test_a_new_worker_router_is_started_per_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter[str] = Counter()
    counted(monkeypatch, docs_written_router.CopiesRouter, calls)
    monkeypatch.setattr(docs_written_router.CopiesRouter, "resets", "new-worker", raising=False)
    figures = run((PLUGIN,))
    assert calls == {"copies-router start": 2, "copies-router close": 2}
    assert all(found == held == claimed for held, found, claimed in figures[PLUGIN])


def test_a_router_that_ignores_the_clear_over_claims_next(monkeypatch: pytest.MonkeyPatch) -> None:
    apply = docs_written_router.CopiesRouter.apply

    def ignores_clears(self: object, events: Sequence[object], rank: int) -> None:
        kept = [e for e in events if type(e).__name__ != "AllBlocksCleared"]
        apply(self, kept, rank)  # type: ignore[arg-type]

    monkeypatch.setattr(docs_written_router.CopiesRouter, "apply", ignores_clears)
    (first, second) = run((PLUGIN,))[PLUGIN]
    assert first[1] == first[0] == first[2]  # nothing to keep yet: exact
    _, found, claimed = second
    assert found < claimed, second  # the first scenario's blocks, still claimed
