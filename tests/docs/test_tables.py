"""Every table renders: the build fails on a Markdown table that would show as text or
lose cells, and no built page holds a paragraph of raw table text."""

from __future__ import annotations

import html
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from kvpool.conformance.tools.reference.mkdocs_hook import on_page_markdown
from kvpool.conformance.tools.reference.table_check import cells, malformed_tables
from mkdocs.exceptions import PluginError

GOOD = """\
| rule | what `a | b` means | count |
|---|:---:|--:|
| `free-held` | a pipe \\| escaped | 3 |
"""


def test_a_well_formed_table_passes() -> None:
    assert malformed_tables(GOOD) == []
    assert cells("| `a | b` | c \\| d | e |") == ["`a | b`", "c \\| d", "e"]


def test_a_separator_with_another_column_count_is_caught() -> None:
    text = "Intro\n\n| a | b | c |\n|---|---|---|---|\n| 1 | 2 | 3 |\n"
    assert malformed_tables(text) == [
        "line 3: the header row has 3 cells and the separator row 4: the table renders as text"
    ]


def test_a_row_with_more_or_fewer_cells_is_caught() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 | 3 |\n| 1 |\n"
    assert malformed_tables(text) == [
        "line 3: 3 cells in a table of 2 columns: cells are dropped",
        "line 4: 1 cells in a table of 2 columns: cells are missing",
    ]


def test_rows_without_a_separator_are_caught() -> None:
    assert malformed_tables("| a | b |\n| 1 | 2 |\n") == [
        "line 1: rows starting with '|' but no separator row ('|---|---|') under the "
        "first: it renders as text"
    ]


def test_code_blocks_are_not_tables() -> None:
    text = "```text\n| a | b |\n|---|\n```\n\n    ~~~\n    | x |\n    ~~~\n"
    assert malformed_tables(text) == []


def page_at(uri: str) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(src_uri=uri, generated_by=None))


def test_the_build_hook_fails_on_a_malformed_table(tmp_path: Path) -> None:
    config = SimpleNamespace(docs_dir=str(tmp_path))
    bad = "# T\n\n| a | b | c |\n|---|---|---|---|\n"
    with pytest.raises(PluginError, match=r"(?s)docs/guide/x.md: a malformed .*line 3: the header"):
        on_page_markdown(bad, page_at("guide/x.md"), config, None)  # type: ignore[arg-type]
    assert on_page_markdown(GOOD, page_at("guide/x.md"), config, None) == GOOD  # type: ignore[arg-type]


def test_every_hand_written_page_has_well_formed_tables() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    found = [
        f"{p}: {m}" for p in sorted(docs.rglob("*.md")) for m in malformed_tables(p.read_text())
    ]
    assert not found


#: A paragraph that starts as a table row: Markdown that did not become a table.
RAW_ROW = re.compile(r"<p>\s*\|[^<]*\|")


def raw_table_text(site: Path) -> list[str]:
    """``page: text`` for every built paragraph that is a table left as text."""
    found = []
    for built in sorted(site.rglob("*.html")):
        for match in RAW_ROW.finditer(built.read_text(encoding="utf-8")):
            found.append(f"{built.relative_to(site)}: {html.unescape(match.group(0))[:60]}")
    return found


def test_no_built_page_shows_a_table_as_text(built_site: Path, tmp_path: Path) -> None:
    assert not raw_table_text(built_site)
    assert "<table>" in (built_site / "guide" / "formal-checks" / "index.html").read_text()
    planted = tmp_path / "guide" / "index.html"
    planted.parent.mkdir()
    planted.write_text("<p>| spec invariant | model |\n|---|---|---|</p>")
    assert raw_table_text(tmp_path) == [
        "guide/index.html: <p>| spec invariant | model |\n|---|---|---|"
    ]
