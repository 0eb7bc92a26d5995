"""The markers hand-written pages use, and the hook that expands them."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from kvpool.conformance.tools.reference.fragments import (
    FRAGMENTS,
    UnknownMarker,
    expand,
    linker_for,
)
from kvpool.conformance.tools.reference.mkdocs_hook import (
    expand_operations,
    on_config,
    on_files,
    on_page_markdown,
)
from kvpool.conformance.tools.reference.pages import OPERATIONS_INDEX
from kvpool.spec import ALL_ACTIONS
from mkdocs.config import load_config
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

CONFIG = Path(__file__).resolve().parents[2] / "mkdocs.yml"


def test_links_are_relative_to_the_page() -> None:
    link = linker_for("guide/lifecycle.md")
    assert link("reference/actions/touch.md") == "../reference/actions/touch.md"
    assert linker_for("index.md")("reference/rules.md") == "reference/rules.md"


@pytest.mark.parametrize("name", sorted(FRAGMENTS))
def test_each_marker_is_replaced(name: str) -> None:
    page = f"# A page\n\n<!-- kvpool:{name} -->\n\nText after.\n"
    out = expand(page, "guide/page.md")
    assert "kvpool:" not in out
    assert out.startswith("# A page\n") and out.endswith("Text after.\n")
    assert len(out) > len(page)


def test_the_version_table_marker_lists_every_release() -> None:
    from kvpool.spec.profile import VLLM_RELEASES

    out = expand("<!-- kvpool:version-table -->", "guide/profiles.md")
    for first, profile in VLLM_RELEASES:
        assert ".".join(map(str, first)) in out and profile.name in out


def test_an_unknown_marker_names_the_page_and_line() -> None:
    with pytest.raises(UnknownMarker, match=r"guide/x\.md:3: unknown marker.*lifecycle-diagramm"):
        expand("# X\n\n<!-- kvpool:lifecycle-diagramm -->\n", "guide/x.md")


def test_a_marker_inside_a_code_fence_is_left_alone() -> None:
    page = "```text\n<!-- kvpool:no-such-marker -->\n```\n"
    assert expand(page, "guide/x.md") == page


def test_the_hook_fails_the_build_on_an_unknown_marker() -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri="guide/x.md"))
    config = SimpleNamespace(docs_dir="docs")
    with pytest.raises(PluginError, match="unknown marker"):
        on_page_markdown("<!-- kvpool:typo -->", page, config, None)  # type: ignore[arg-type]


def test_the_hook_expands_the_operations_nav_entry() -> None:
    nav: list[object] = ["index.md", {"Reference": [{"Ops": OPERATIONS_INDEX}]}]
    assert expand_operations(nav)
    section = nav[1]["Reference"][0]["Ops"]  # type: ignore[index]
    assert section[0] == OPERATIONS_INDEX
    assert [next(iter(e)) for e in section[1:]] == [a.operation for a in ALL_ACTIONS]
    assert not expand_operations(["index.md"])


def test_the_hook_needs_the_operations_entry_in_the_nav() -> None:
    config = load_config(str(CONFIG))
    config.nav = ["index.md"]
    with pytest.raises(PluginError, match=re.escape(OPERATIONS_INDEX)):
        on_config(config)


def test_the_hook_refuses_a_committed_generated_page(tmp_path: Path) -> None:
    config = load_config(str(CONFIG))
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "rules.md").write_text("a stale copy\n")
    files = Files([File("reference/rules.md", str(tmp_path), str(tmp_path / "site"), True)])
    with pytest.raises(PluginError, match=re.escape("docs/reference/rules.md exists")):
        on_files(files, config)


def test_the_vectors_count_is_counted_from_the_corpus(tmp_path: Path) -> None:
    from kvpool.conformance.tools.reference.fragments import DOCS, vectors_count

    for name in ("seed/touch/safety-1", "seed/touch/order-1", "vllm-0.33/invariants/x"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{name}.itf.json").write_text("{}")
    (tmp_path / "seed" / "notes.txt").write_text("not a vector")
    shown = vectors_count(tmp_path)
    assert "| `seed` | 2 |" in shown and "| `vllm-0.33` | 1 |" in shown
    assert "| all | 3 |" in shown
    committed = sum(1 for _ in (DOCS.parent / "vectors").rglob("*.itf.json"))
    assert f"| all | {committed:,} |" in vectors_count(DOCS.parent / "vectors")
