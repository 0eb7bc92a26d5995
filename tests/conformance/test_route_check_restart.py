"""The restart scenario on the wire: a restarted publisher's sequence starts again from 0,
so a router's watermark is the old publisher's until it has taken the new one's first
batch; the suite waits for it to move before it asks (issue 37: vllm-router's over-claim
after a restart was the suite asking on the old watermark). A router that pauses before it
takes a restart is asked only after it, and with the old watermark taken for the new (the
fault as it was) the same router is caught over-claiming."""

from __future__ import annotations

import pytest
from kvpool.conformance.consumers.naming import parse_consumer
from kvpool.conformance.tools.routes import scenarios
from kvpool.conformance.tools.routes.scenarios import Setting, run_scenario

PLUGIN = "slow_restart_router:SlowRestartRouter"  # pytest puts this folder on sys.path


def restart_tally() -> scenarios.Tally:
    parse_consumer(PLUGIN)
    result = run_scenario("restart", Setting("impl", "0.33.0", (PLUGIN,), requests=8))
    assert result.fed == {PLUGIN: "wire"}
    tally = result.tallies[PLUGIN]
    assert tally.checks > 0 and tally.held > 0
    return tally


def test_a_router_slow_to_take_a_restart_is_asked_after_it() -> None:
    tally = restart_tally()
    assert tally.found == tally.held == tally.claimed


def test_the_old_publishers_watermark_taken_for_the_new_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # planted: nothing kept at the restart, so the old watermark counts for the new publisher
    monkeypatch.setattr(scenarios._Live, "keep_stale", lambda self, rank, only=None: None)
    tally = restart_tally()
    assert tally.claimed > tally.found
