"""The lifecycle diagram reads in both of the site's colour schemes: in headless Chromium,
every text of the SVG has a contrast of at least 4.5:1 with the page behind it, in
Material's light (``default``) and dark (``slate``) scheme. Skipped only when Chromium is
missing and ``KVPOOL_REQUIRE_CHROMIUM`` is unset (CI sets it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium_pipe import Chromium, find_chromium
from site_crawl import serve

#: WCAG's floor for body text.
LEAST_CONTRAST = 4.5

#: Per text of the diagram: the contrast of its computed fill with the page background,
#: after switching the page to a colour scheme (JavaScript run in the page).
CONTRASTS = """
(scheme => {
  document.body.setAttribute('data-md-color-scheme', scheme);
  const rgb = c => (c.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
  const lum = c => {
    const [r, g, b] = rgb(c).map(v => v / 255)
      .map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const page = getComputedStyle(document.body).backgroundColor;
  const texts = [...document.querySelectorAll('svg.kvpool-diagram text')];
  return texts.map(t => {
    const fill = getComputedStyle(t).fill;
    const [hi, lo] = [lum(fill), lum(page)].sort((a, b) => b - a);
    return [t.textContent, fill, page, (hi + 0.05) / (lo + 0.05)];
  });
})(%r)
"""


@pytest.fixture(scope="module")
def lifecycle_page(
    built_site: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("KVPOOL_REQUIRE_CHROMIUM"):
            pytest.fail("KVPOOL_REQUIRE_CHROMIUM is set but no Chromium was found")
        pytest.skip("no Chromium on this machine (set KVPOOL_REQUIRE_CHROMIUM to fail instead)")
    browser = Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))
    with serve(built_site) as base:
        browser.render(base + "guide/lifecycle/")
        yield browser
    browser.close()


def unreadable(browser: Chromium, scheme: str) -> list[str]:
    """The diagram's texts under ``LEAST_CONTRAST`` in ``scheme``, each with its colours."""
    rows = browser.evaluate(CONTRASTS % scheme)
    assert rows, "the lifecycle page has no diagram text"
    return [
        f"{text!r}: {fill} on {page} ({ratio:.2f}:1)"
        for text, fill, page, ratio in rows
        if ratio < LEAST_CONTRAST
    ]


@pytest.mark.parametrize("scheme", ["default", "slate"])
def test_every_diagram_text_reads_in_both_schemes(lifecycle_page: Chromium, scheme: str) -> None:
    assert not unreadable(lifecycle_page, scheme)


def test_text_left_to_svg_default_fill_is_caught_in_the_dark_scheme(
    lifecycle_page: Chromium,
) -> None:
    # the fault of the first diagram: text without a fill is drawn black, on slate's dark page
    lifecycle_page.evaluate(
        "document.querySelectorAll('svg.kvpool-diagram text')"
        ".forEach(t => t.removeAttribute('fill'))"
    )
    try:
        assert not unreadable(lifecycle_page, "default")
        dark = unreadable(lifecycle_page, "slate")
        assert dark and "rgb(0, 0, 0)" in dark[0]
    finally:
        lifecycle_page.evaluate(
            "document.querySelectorAll('svg.kvpool-diagram text')"
            ".forEach(t => t.setAttribute('fill', 'currentColor'))"
        )
