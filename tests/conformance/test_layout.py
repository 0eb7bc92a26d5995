"""The folders draw the layers: engines and machines import no tool, an engine's folder no
other engine's (but the one it is built on, and vLLM's pool API adapter), and every folder
says what it holds (the architecture page's table is read from there)."""

from __future__ import annotations

from pathlib import Path

from kvpool.conformance.tools.reference.layout_table import UNDOCUMENTED, layout_table
from test_import_cycles import PACKAGE, ROOT, import_graph  # pytest puts this folder on sys.path

#: An engine folder may import another only where the engine is built on it.
BUILT_ON = {("aphrodite", "vllm")}
#: The adapter every pool with vLLM's BlockPool API shares.
SHARED_ENGINE = "vllm_api"


def _layer(module: str) -> tuple[str, str]:
    parts = module.split(".")[2:]
    return (parts[0], parts[1] if len(parts) > 1 else "") if parts else ("", "")


def broken_rules(graph: dict[str, set[str]]) -> list[str]:
    """Every import in ``graph`` that crosses the layers the wrong way, said in a line."""
    broken = []
    for source, targets in sorted(graph.items()):
        (layer, folder) = _layer(source)
        for target in sorted(targets):
            (their_layer, their_folder) = _layer(target)
            if layer in ("engines", "machines") and their_layer == "tools":
                broken.append(f"{source} imports the tool {target}")
            if (
                layer == "engines" == their_layer
                and folder != their_folder
                and their_folder != SHARED_ENGINE
                and (folder, their_folder) not in BUILT_ON
            ):
                broken.append(f"{source} imports another engine's {target}")
    return broken


def test_the_layers_import_only_downwards() -> None:
    assert broken_rules(import_graph(ROOT)) == []


def test_a_wrong_way_import_is_named() -> None:
    planted = {
        f"{PACKAGE}.machines.pool.draw": {f"{PACKAGE}.tools.diff.run"},
        f"{PACKAGE}.engines.sglang.entry": {
            f"{PACKAGE}.engines.lmdeploy.release",
            f"{PACKAGE}.engines.vllm_api.adapter",  # allowed: the shared adapter
            f"{PACKAGE}.machines.pool.target",  # allowed: a machine's protocol
        },
        f"{PACKAGE}.engines.aphrodite.entry": {f"{PACKAGE}.engines.vllm.entry"},  # built on
    }
    assert broken_rules(planted) == [
        f"{PACKAGE}.engines.sglang.entry imports another engine's "
        f"{PACKAGE}.engines.lmdeploy.release",
        f"{PACKAGE}.machines.pool.draw imports the tool {PACKAGE}.tools.diff.run",
    ]


def test_every_folder_says_what_it_holds() -> None:
    table = layout_table(ROOT)
    assert UNDOCUMENTED not in table
    for folder in ("engines/vllm", "machines/pool", "search", "tools/conform", "targets"):
        assert f"| `conformance/{folder}/` |" in table


def test_an_undocumented_folder_shows(tmp_path: Path) -> None:
    root = tmp_path / "conformance"
    (root / "tools" / "newtool").mkdir(parents=True)
    (root / "tools" / "__init__.py").write_text('"""The tools."""\n')
    (root / "tools" / "newtool" / "__init__.py").write_text("X = 1\n")
    table = layout_table(root)
    assert "| `conformance/tools/` | The tools. |" in table
    assert f"| `conformance/tools/newtool/` | {UNDOCUMENTED} |" in table


def test_the_architecture_page_carries_the_table() -> None:
    page = ROOT.parent / "docs" / "guide" / "architecture.md"
    assert "<!-- kvpool:layout -->" in page.read_text(encoding="utf-8")
