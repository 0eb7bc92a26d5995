"""Consumer protocol 2: a router written from the extension API page (at most 40 lines,
importing nothing but ``kvpool.conformance.api``) runs under route-check and at the events
level, and a planted fault in it is caught; a protocol 1 consumer is adapted; a router
that misnames a hook or states no valid feed is refused by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from kvpool.conformance.consumers.naming import make_router, parse_consumer
from kvpool.conformance.consumers.protocol import ConsumerError
from kvpool.conformance.consumers.router import FromProtocol1
from kvpool.conformance.tools.routes.scenarios import Setting, run_scenario
from test_router_consumers import router_run  # pytest puts this folder on sys.path

HERE = Path(__file__).parent
PLUGIN = "docs_written_router:make_router"
WIRE_PLUGIN = "docs_written_wire_router:WireCopiesRouter"


@pytest.mark.parametrize("file", ["docs_written_router.py", "docs_written_wire_router.py"])
def test_the_plugin_is_small_and_imports_only_the_api(file: str) -> None:
    source = (HERE / file).read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 40
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            imported.add(f"{node.module}:{','.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    kvpool = {i for i in imported if i.startswith("kvpool")}
    assert kvpool == {"kvpool.conformance:api"}, imported


def test_the_plugin_passes_route_check_in_process() -> None:
    parse_consumer(PLUGIN)
    setting = Setting("impl", "0.33.0", ("count", PLUGIN), requests=8)
    result = run_scenario("twins", setting)
    assert result.fed == {"count": "process", PLUGIN: "process"}
    tally = result.tallies[PLUGIN]
    assert tally.checks > 0 and tally.held > 0
    assert tally.found == tally.held == tally.claimed


def test_the_plugin_passes_the_events_level() -> None:
    assert router_run(PLUGIN, seed=1, max_examples=30) == []


@pytest.mark.parametrize("scenario", ["clean", "twins"])
def test_the_wire_plugin_passes_route_check_on_the_wire(scenario: str) -> None:
    parse_consumer(WIRE_PLUGIN)
    result = run_scenario(scenario, Setting("impl", "0.33.0", (WIRE_PLUGIN,), requests=8))
    assert result.fed == {WIRE_PLUGIN: "wire"}
    tally = result.tallies[WIRE_PLUGIN]
    assert tally.checks > 0 and tally.held > 0
    assert tally.found == tally.held == tally.claimed


def test_the_wire_plugin_passes_the_events_level() -> None:
    assert router_run(WIRE_PLUGIN, seed=1, max_examples=10) == []


def test_a_planted_fault_in_the_plugin_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import docs_written_router

    def presence_only(self: object, events: object, rank: int) -> None:
        # planted: a removal forgets every copy (a set, not a count)
        held = self.copies[rank]  # type: ignore[attr-defined]
        for event in events:  # type: ignore[attr-defined]
            kind = type(event).__name__
            if kind == "BlockStored":
                held.update({(event.group_id, h): 1 for h in event.block_hashes})
            elif kind == "BlockRemoved":
                held[(event.group_id, event.block_hash)] = 0
            elif kind == "AllBlocksCleared":
                held.clear()

    monkeypatch.setattr(docs_written_router.CopiesRouter, "apply", presence_only)
    setting = Setting("impl", "0.33.0", (PLUGIN,), requests=8)
    tally = run_scenario("twins", setting).tallies[PLUGIN]
    assert tally.found < tally.held


def test_a_protocol_1_consumer_is_adapted() -> None:
    parse_consumer("docs_written_consumer:make_router")
    router = make_router("docs_written_consumer:make_router")
    assert isinstance(router, FromProtocol1) and router.protocol == 2


class _Misspelt:
    name = "misspelt"
    protocol = 2
    feeds = "process"

    def credited(self, prompt: object) -> dict[int, int]:
        return {}

    def apply(self, events: object, rank: int) -> None:
        return None

    def aplied(self) -> dict[int, int]:  # a misspelt hook: never read
        return {}


class _NoFeed(_Misspelt):
    feeds = "pigeon"
    aplied = None  # type: ignore[assignment]


def test_a_misspelt_hook_or_a_bad_feed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import docs_written_router

    monkeypatch.setattr(docs_written_router, "make_misspelt", _Misspelt, raising=False)
    monkeypatch.setattr(docs_written_router, "make_no_feed", _NoFeed, raising=False)
    with pytest.raises(ConsumerError, match="did you mean 'applied'"):
        parse_consumer("docs_written_router:make_misspelt")
    with pytest.raises(ConsumerError, match="feeds is 'pigeon'"):
        parse_consumer("docs_written_router:make_no_feed")


def test_the_extension_api_page_shows_the_plugins_as_kept() -> None:
    page = (HERE.parents[1] / "docs" / "tutorial" / "extension-api.md").read_text("utf-8")
    for file in ("docs_written_router.py", "docs_written_wire_router.py"):
        source = (HERE / file).read_text("utf-8")
        body = source.split('"""', 2)[2].lstrip("\n")
        assert f"```python\n{body}```" in page, file
