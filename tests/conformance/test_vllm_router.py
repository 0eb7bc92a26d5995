"""vllm-router 0.1.17 as a consumer, run as deployed (a process on loopback, fake workers,
the real wire): exact on a clean stream, its replay source heals a late join, a restart
is seen (it forgets the old publisher's blocks when the sequence goes back, and the suite
asks only once its watermark has left the old publisher's: test_route_check_restart.py);
and its two defects, each in a minimal stream through vLLM 0.33.0's publisher: removing
one of two copies of a hash drops the block, and one ``BlockStored`` with no hashes makes
it forget the worker's earlier blocks and the rest of the batch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kvpool.conformance.consumers.naming import make_consumer
from kvpool.conformance.consumers.protocol import ConsumerError
from kvpool.conformance.consumers.router import Prompt
from kvpool.conformance.consumers.vllm_router import HIDDEN_KEY, INSTALL, VllmRouter, find_binary
from kvpool.conformance.tools.routes import scenarios
from kvpool.conformance.tools.routes.scenarios import Setting, run_scenario
from kvpool.spec.events import BlockRemoved, BlockStored

try:
    find_binary()
    MISSING = ""
except ConsumerError:
    MISSING = f"the vllm-router consumer needs the router: {INSTALL}"
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)

H1, H2, H3 = (bytes([n]) * 8 for n in (1, 2, 3))


def stored(*hashes: bytes, parent: bytes | None = None) -> BlockStored:
    return BlockStored(tuple(hashes), parent, 0, 16, 16 * len(hashes))


@pytest.mark.parametrize(("scenario", "lost", "extra"), [
    ("clean", False, False), ("late-join", False, False), ("restart", False, False),
])  # fmt: skip
def test_route_check_on_the_wire(scenario: str, lost: bool, extra: bool) -> None:
    setting = Setting("impl", "0.33.0", ("count", "vllm-router"), requests=8)
    result = run_scenario(scenario, setting)
    assert result.fed == {"count": "process", "vllm-router": "wire"}
    t = result.tallies["vllm-router"]
    assert t.checks > 0 and t.held > 0
    assert (t.found < t.held) is lost and (t.found < t.claimed) is extra


def test_the_rank_that_holds_a_prompt_is_routed_to() -> None:
    """Two data-parallel ranks, rank 1 alone serving: vllm-router, started as it is deployed
    for data-parallel workers, routes each prompt to rank 1 with rank 1's blocks (started
    without --intra-node-data-parallel-size it indexes rank 1 but routes to rank 0 only,
    and credits nothing). The worker, as a vLLM server started with the router's API key,
    refuses no request."""
    setting = Setting("impl", "0.33.0", ("vllm-router",), requests=4)
    routers = scenarios.Routers(setting, scenarios.DP_RANKS)
    try:
        live = scenarios._Live(setting, routers, scenarios.DP_RANKS)
        try:
            live.join()
            live.serving = 1
            live.workload(setting.requests, setting.seed)
            live.check()
            tokens, hashes = next(reversed(live.engine(1).prefixes.items()))
            held = live.engine(1).truth(tokens, hashes)
            router = live.consumers["vllm-router"]
            answer = router.credited(Prompt((*tokens, 1), hashes))
            worker = router.workers[0]  # type: ignore[attr-defined]
            sent, refused = dict(worker.ranks), worker.asked["refused"]
        finally:
            live.close()
    finally:
        routers.close()
    assert held > 0 and answer == {1: held}
    assert sent.get(1, 0) > 0 and refused == 0  # sent to rank 1, with the API key
    t = live.tallies["vllm-router"]
    assert t.checks > 0 and t.held > 0 and t.found == t.held == t.claimed


def test_the_api_key_is_kept_out_of_its_log(tmp_path: Path) -> None:
    """The router's log, as the suite reads and reports it, never shows the API key, even
    split between two reads."""
    router = VllmRouter()
    router._key = "k3y-secret"
    log = tmp_path / "router.log"
    router.log_file = cast(Any, SimpleNamespace(name=str(log)))
    log.write_text("started with k3y-se")
    router._log()
    with log.open("a") as more:
        more.write("cret; and again k3y-secret\n")
    text = router._log()
    assert "secret" not in text and text.count(HIDDEN_KEY) == 2
    router.log_file = None


def test_removing_one_of_two_copies_drops_the_block() -> None:
    """vLLM publishes a store and a removal per copy (count contract): one copy is left,
    so the worker still serves the block; vllm-router keeps presence only."""
    router = make_consumer("vllm-router")
    router.apply([stored(H1), stored(H2, parent=H1)])
    assert router.held_blocks([H1, H2], 0) == 2  # the router sees the stream
    router.apply([stored(H1)])
    router.apply([BlockRemoved(H1, 0)])
    assert router.held_blocks([H1, H2], 0) == 0  # the defect: one copy is still held


def test_an_empty_store_forgets_the_worker() -> None:
    """vLLM 0.33.0's cache_full_blocks publishes a BlockStored with no hashes when every
    new full block is null or masked; vllm-router refuses the whole batch and forgets the
    worker's earlier blocks, and the valid store beside it."""
    router = make_consumer("vllm-router")
    router.apply([stored(H1)])
    assert router.held_blocks([H1], 0) == 1
    router.apply([BlockStored((), None, 0, 16, 0), stored(H3)])
    assert router.held_blocks([H1], 0) == 0  # the earlier block, forgotten
    assert router.held_blocks([H3], 0) == 0  # the valid store in the same batch, lost
