"""Code blocks fit their page: in headless Chromium, no code block of the findings page
(long shrunk action lines), a guide page or a reference page is wider than its box, and
every block leaves room for the copy button. Skipped only when Chromium is missing and
``KVPOOL_REQUIRE_CHROMIUM`` is unset (CI sets it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium_pipe import Chromium, find_chromium
from site_crawl import serve

PAGES = ("findings/", "guide/state/", "reference/invariants/", "getting-started/")

#: Per code block of the page: its first characters, how much wider its content is than
#: its box, and its right padding in pixels (where the copy button sits).
BLOCKS = """
[...document.querySelectorAll('.md-typeset pre > code')].map(c => [
  c.textContent.slice(0, 60),
  c.scrollWidth - c.clientWidth,
  parseFloat(getComputedStyle(c).paddingRight),
])
"""

#: The copy button is about 1.5em wide; text must not run under it.
LEAST_PADDING_PX = 24


@pytest.fixture(scope="module")
def site(
    built_site: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Chromium, str]]:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("KVPOOL_REQUIRE_CHROMIUM"):
            pytest.fail("KVPOOL_REQUIRE_CHROMIUM is set but no Chromium was found")
        pytest.skip("no Chromium on this machine (set KVPOOL_REQUIRE_CHROMIUM to fail instead)")
    browser = Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))
    with serve(built_site) as base:
        yield browser, base
    browser.close()


def misfits(browser: Chromium) -> list[str]:
    """The code blocks of the page last rendered that overflow or crowd the copy button."""
    rows = browser.evaluate(BLOCKS)
    assert rows, "the page has no code block"
    return [
        f"{text!r}: {over}px too wide, {pad}px padding"
        for text, over, pad in rows
        if over > 1 or pad < LEAST_PADDING_PX
    ]


@pytest.mark.parametrize("path", PAGES)
def test_every_code_block_fits_its_page(site: tuple[Chromium, str], path: str) -> None:
    browser, base = site
    browser.render(base + path)
    assert not misfits(browser)


def test_without_the_stylesheet_the_findings_page_overflows(site: tuple[Chromium, str]) -> None:
    browser, base = site
    browser.render(base + "findings/")
    browser.evaluate("document.querySelector('link[href*=\"kvpool.css\"]').remove()")
    assert misfits(browser)
