"""Pages read well at 1400 px in either colour preference: in headless Chromium, with the
reader's ``prefers-color-scheme`` light and then dark, the site shows the matching scheme,
no code block wraps (a wrapped line goes on at column 0 and reads as dedented Python) or
crowds the copy button, no table is cut (a table wider than the page scrolls in its own
box), and no name in a table (inline code, or the first cell of a row) is split over
lines. Skipped only when Chromium is missing
and ``KVPOOL_REQUIRE_CHROMIUM`` is unset (CI sets it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chromium_pipe import Chromium, find_chromium
from docs_build import CONFIG
from site_crawl import serve

#: The pages with the longest code lines and the widest tables.
PAGES = (
    "findings/",
    "targets/",
    "getting-started/",
    "guide/kv-events-contract/",
    "guide/state/",
    "reference/actions/free_blocks/",
    "reference/profiles/",
    "reference/proofs/",
    "reference/invariants/",
)

WIDTH, HEIGHT = 1400, 900

#: The scheme Material shows for each ``prefers-color-scheme``.
SCHEMES = {"light": "default", "dark": "slate"}

#: The copy button is about 1.5em wide; the end of a line must not run under it.
LEAST_PADDING_PX = 24

#: Every way the page last rendered fails its reader: ``[kind, what]`` pairs.
MISFITS = """
(() => {
  const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const article = document.querySelector('article.md-content__inner');
  const holder = el => {
    let p = el.parentElement;
    while (p !== article && !scrolls(p)) p = p.parentElement;
    return p;
  };
  const out = [];
  const doc = document.scrollingElement;
  if (doc.scrollWidth > doc.clientWidth + 1)
    out.push(['page', `the page scrolls sideways by ${doc.scrollWidth - doc.clientWidth}px`]);
  for (const t of article.querySelectorAll('table')) {
    const name = (t.querySelector('th') || t).textContent.trim().slice(0, 40);
    const box = holder(t);
    if (t.scrollWidth > t.clientWidth + 1 && !scrolls(t))
      out.push(['cut-table', `${name}: hides ${t.scrollWidth - t.clientWidth}px of its cells`]);
    if (!scrolls(box) && t.getBoundingClientRect().right > box.getBoundingClientRect().right + 1)
      out.push(['cut-table', `${name}: runs past the page with no box to scroll it`]);
    for (const c of t.querySelectorAll('code'))
      if (c.getClientRects().length > 1)
        out.push(['split-name', `${name}: ${c.textContent} is split over lines`]);
    for (const cell of t.querySelectorAll('tr > :first-child')) {
      const range = document.createRange();
      range.selectNodeContents(cell);
      // lines: runs of rects that overlap vertically (inline code sits a little higher)
      const rects = [...range.getClientRects()].filter(r => r.width > 0)
        .sort((a, b) => a.top - b.top);
      let lines = 0, bottom = -Infinity;
      for (const r of rects) {
        if (r.top >= bottom - 1) lines += 1;
        bottom = Math.max(bottom, r.bottom);
      }
      if (lines > 1)
        out.push(['split-name', `${name}: row name ${cell.textContent.trim()} wraps`]);
    }
  }
  for (const c of article.querySelectorAll('pre > code')) {
    const first = JSON.stringify(c.textContent.slice(0, 40));
    const style = getComputedStyle(c);
    if (!['pre', 'nowrap'].includes(style.whiteSpace))
      out.push(['wrapped-code', `${first}: white-space ${style.whiteSpace}`]);
    if (c.scrollWidth > c.clientWidth + 1 && !scrolls(c))
      out.push(['cut-code', `${first}: cut, no scrolling`]);
    if (parseFloat(style.paddingRight) < LEAST_PADDING_PX)
      out.push(['copy-button', `${first}: ${style.paddingRight} right padding`]);
  }
  return out;
})()
""".replace("LEAST_PADDING_PX", str(LEAST_PADDING_PX))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("KVPOOL_REQUIRE_CHROMIUM"):
            pytest.fail("KVPOOL_REQUIRE_CHROMIUM is set but no Chromium was found")
        pytest.skip("no Chromium on this machine (set KVPOOL_REQUIRE_CHROMIUM to fail instead)")
    chromium = Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def site(built_site: Path) -> Iterator[str]:
    with serve(built_site) as base:
        yield base


def shown_scheme(browser: Chromium, url: str, preference: str) -> str:
    browser.emulate(WIDTH, HEIGHT, preference)
    browser.render(url)
    scheme: str = browser.evaluate("document.body.getAttribute('data-md-color-scheme')")
    return scheme


def misfits(browser: Chromium) -> list[str]:
    """What the page last rendered gets wrong, one ``kind: what`` line each."""
    return [f"{kind}: {what}" for kind, what in browser.evaluate(MISFITS)]


@pytest.mark.parametrize("preference", SCHEMES)
@pytest.mark.parametrize("path", PAGES)
def test_each_page_reads_well_in_each_colour_preference(
    browser: Chromium, site: str, path: str, preference: str
) -> None:
    assert shown_scheme(browser, site + path, preference) == SCHEMES[preference]
    assert browser.evaluate("document.querySelectorAll('article table, article pre').length")
    assert not misfits(browser)


# --- each check catches its planted fault ------------------------------------------------


def test_wrapping_code_is_caught(browser: Chromium, site: str) -> None:
    """The site's first stylesheet wrapped code (pre-wrap): every block is reported."""
    shown_scheme(browser, site + "reference/actions/free_blocks/", "light")
    browser.evaluate(
        "document.head.insertAdjacentHTML('beforeend', "
        "'<style>.md-typeset pre > code { white-space: pre-wrap; padding-right: 0 }</style>')"
    )
    found = misfits(browser)
    assert any(f.startswith("wrapped-code: ") for f in found)
    assert any(f.startswith("copy-button: ") for f in found)


def test_names_split_and_tables_cut_are_caught(browser: Chromium, site: str) -> None:
    """Without the site's stylesheet Material breaks inline code anywhere; a table that
    cannot scroll runs past the page."""
    shown_scheme(browser, site + "reference/proofs/", "light")
    browser.evaluate("document.querySelector('link[href*=\"kvpool.css\"]').remove()")
    assert any(f.startswith("split-name: ") for f in misfits(browser))
    shown_scheme(browser, site + "findings/", "light")
    browser.evaluate("document.querySelector('link[href*=\"kvpool.css\"]').remove()")
    assert any("row name sglang-0.4.6.post5-paged wraps" in f for f in misfits(browser))
    browser.evaluate(
        "document.querySelectorAll('.md-typeset__scrollwrap')"
        ".forEach(w => w.style.overflowX = 'visible')"
    )
    assert any(f.startswith("cut-table: ") for f in misfits(browser))


def test_a_palette_without_media_queries_is_caught(browser: Chromium, tmp_path: Path) -> None:
    """The site's first palette: two schemes with a toggle and no ``media``, so the first
    one shows whatever the reader prefers. A one-page site built with it shows the light
    scheme under a dark preference."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    theme = yaml.safe_load(CONFIG.read_text(encoding="utf-8").split("\nhooks:")[0])["theme"]
    for entry in theme["palette"]:
        entry.pop("media", None)
    theme["palette"] = [entry for entry in theme["palette"] if "scheme" in entry]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n| a |\n|---|\n| `b` |\n")
    (tmp_path / "mkdocs.yml").write_text(
        yaml.safe_dump({"site_name": "planted", "theme": theme, "plugins": []})
    )
    build(load_config(str(tmp_path / "mkdocs.yml"), site_dir=str(tmp_path / "site")))
    with serve(tmp_path / "site") as base:
        assert shown_scheme(browser, base, "dark") == "default"
