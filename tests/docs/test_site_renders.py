"""The built site, read as a reader would: served on localhost, every page rendered in
headless Chromium, every internal link followed from the home page.

Fails on a broken internal link or asset, a missing anchor, a request that fails or leaves
the machine, a page whose main content is empty, or a nav page no link reaches. Skipped
only when Chromium is missing and ``KVPOOL_REQUIRE_CHROMIUM`` is unset (CI sets it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from chromium_pipe import Chromium, find_chromium
from docs_build import CONFIG
from kvpool.conformance.tools.reference.mkdocs_hook import on_config
from mkdocs.config import load_config
from site_crawl import crawl, serve


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


def nav_paths() -> set[str]:
    """The URL path of every page the nav lists (after the hook adds the operation pages)."""
    config = on_config(load_config(str(CONFIG)))
    paths: set[str] = set()

    def visit(items: object) -> None:
        if isinstance(items, str):
            stem = items.removesuffix(".md")
            stem = stem.removesuffix("index")
            paths.add("/" + (stem if not stem or stem.endswith("/") else stem + "/"))
        elif isinstance(items, list):
            for item in items:
                visit(item)
        elif isinstance(items, dict):
            for value in items.values():
                visit(value)

    visit(config.nav)
    return paths


def test_every_page_renders_and_every_link_works(built_site: Path, browser: Chromium) -> None:
    expected = nav_paths()
    assert "/reference/actions/touch/" in expected and "/guide/lifecycle/" in expected
    with serve(built_site) as base:
        result = crawl(base, browser, expected)
    assert not result.problems, "\n".join(map(str, result.problems))
    assert expected <= set(result.rendered)


# --- each check catches its planted fault ------------------------------------------------

# a page of a small hand-made site: no favicon request, Material's main content element
ARTICLE = (
    '<link rel="icon" href="data:,">'
    '<article class="md-content__inner"><h1>{title}</h1>{body}</article>'
)


def write(site: Path, pages: dict[str, str]) -> Path:
    for path, body in pages.items():
        target = site / path / "index.html" if not path.endswith(".css") else site / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    return site


def clean_site(site: Path) -> Path:
    return write(
        site,
        {
            "": ARTICLE.format(
                title="Home", body='<p>Hi <a href="a/">A</a> <a href="a/#x">x</a></p>'
            ),
            "a": '<link rel="stylesheet" href="../style.css">'
            + ARTICLE.format(title="A", body='<p id="x">Text, <a href="../">home</a>.</p>'),
            "style.css": "p { color: black }",
        },
    )


def test_a_clean_small_site_passes(tmp_path: Path, browser: Chromium) -> None:
    with serve(clean_site(tmp_path)) as base:
        result = crawl(base, browser, {"/", "/a/"})
    assert not result.problems, result.problems
    assert set(result.rendered) == {"/", "/a/"}


def test_a_broken_link_is_caught(tmp_path: Path, browser: Chromium) -> None:
    site = clean_site(tmp_path)
    write(site, {"a": ARTICLE.format(title="A", body='<p><a href="../gone/">gone</a></p>')})
    with serve(site) as base:
        result = crawl(base, browser, {"/", "/a/"})
    assert [p.kind for p in result.problems] == ["broken-link", "missing-anchor"]
    assert "../gone/ -> 404" in str(result.problems[0])


def test_an_empty_page_is_caught(tmp_path: Path, browser: Chromium) -> None:
    site = clean_site(tmp_path)
    write(site, {"a": ARTICLE.format(title="A", body='<p id="x"> </p>')})
    with serve(site) as base:
        result = crawl(base, browser, {"/", "/a/"})
    assert [(p.kind, p.url) for p in result.problems] == [("empty-page", "/a/")]


def test_a_nav_page_not_reached_is_caught(tmp_path: Path, browser: Chromium) -> None:
    site = clean_site(tmp_path)
    write(site, {"orphan": ARTICLE.format(title="O", body="<p>nobody links here</p>")})
    with serve(site) as base:
        result = crawl(base, browser, {"/", "/a/", "/orphan/"})
    assert [(p.kind, p.url) for p in result.problems] == [("not-reached", "/orphan/")]


def test_a_missing_asset_and_an_external_request_are_caught(
    tmp_path: Path, browser: Chromium
) -> None:
    site = clean_site(tmp_path)
    (site / "style.css").unlink()
    # 127.0.0.2 is another host as far as the page is concerned, and refuses at once
    write(
        site,
        {
            "": ARTICLE.format(
                title="H", body='<p><a href="a/">A</a><img src="http://127.0.0.2:9/x.png"></p>'
            )
        },
    )
    with serve(site) as base:
        result = crawl(base, browser, {"/", "/a/"})
    assert {"failed-request", "broken-link", "external-request"} <= result.kinds()


def test_the_real_site_with_a_page_removed_and_one_emptied_fails(
    built_site: Path, tmp_path: Path, browser: Chromium
) -> None:
    site = tmp_path / "site"
    shutil.copytree(built_site, site)
    shutil.rmtree(site / "reference" / "rules")
    why = site / "guide" / "why" / "index.html"
    text = why.read_text()
    start = text.index('<article class="md-content__inner')
    end = text.index("</article>", start)
    why.write_text(
        text[:start] + '<article class="md-content__inner md-typeset"><h1>Why</h1>' + text[end:]
    )
    # render only the home page and the emptied one: the home page's nav links every page
    with serve(site) as base:
        result = crawl(base, browser, nav_paths(), follow=lambda path: path == "/guide/why/")
    kinds = {(p.kind, p.url) for p in result.problems}
    assert ("empty-page", "/guide/why/") in kinds
    assert ("not-reached", "/reference/rules/") in kinds
    assert any(p.kind == "broken-link" and "rules" in p.detail for p in result.problems)
