"""Reading the built site as a reader would: serve it, render every page in Chromium, follow
every internal link, and list what is wrong.

Problems found:

- ``broken-link``: an internal href or src (page or asset) that does not answer 200;
- ``missing-anchor``: a link to ``page#id`` where the rendered page has no element ``id``;
- ``failed-request``: a request the rendered page made that failed (a 404 stylesheet, say);
- ``external-request``: a request to any other host (the site must work offline);
- ``empty-page``: a page whose main content has no text besides its title;
- ``not-reached``: a nav page no link led to from the home page.
"""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

from chromium_pipe import Chromium


@dataclass(frozen=True)
class Problem:
    kind: str
    url: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.url}: {self.detail}"


@dataclass
class Crawl:
    """What a crawl saw: the pages it rendered (by path) and the problems."""

    rendered: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def kinds(self) -> set[str]:
        return {p.kind for p in self.problems}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` on a free localhost port for the duration; yields the base URL."""
    handler = partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _Links(HTMLParser):
    """Every href/src of a document, the ids it defines, and the text of its main content
    (Material's ``article``) without its headings' permalink marks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.has_article = False
        self._article_depth = 0
        self._in_h1 = 0
        self._in_headerlink = 0
        self.main_text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("href", "src"):
            value = values.get(name)
            if value is not None and not (tag == "a" and values.get("class") == "md-skip"):
                self.links.append(value)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        classes = (values.get("class") or "").split()
        if tag == "article" and "md-content__inner" in classes:
            self.has_article = True
            self._article_depth = 1
        elif self._article_depth and tag == "article":
            self._article_depth += 1
        if self._article_depth:
            self._in_h1 += tag == "h1"
            self._in_headerlink += tag == "a" and "headerlink" in classes

    def handle_endtag(self, tag: str) -> None:
        if self._article_depth:
            if tag == "h1" and self._in_h1:
                self._in_h1 -= 1
            if tag == "a" and self._in_headerlink:
                self._in_headerlink -= 1
            if tag == "article":
                self._article_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._article_depth and not self._in_h1 and not self._in_headerlink:
            self.main_text.append(data)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _is_page(path: str) -> bool:
    return path.endswith("/") or path.endswith(".html")


def _page_key(path: str) -> str:
    """One name per page: ``/a/`` and ``/a/index.html`` are the same page."""
    return path[: -len("index.html")] if path.endswith("/index.html") else path


def crawl(
    base: str,
    browser: Chromium,
    nav_pages: set[str],
    follow: Callable[[str], bool] = lambda path: True,
) -> Crawl:
    """Render every page reachable from ``base`` and check it; ``nav_pages`` are the paths
    (``/guide/why/``) the nav promises, each of which must be reached. ``follow`` limits
    which linked pages are rendered in turn (every link is still checked)."""
    host = urlsplit(base).netloc
    result = Crawl()
    statuses: dict[str, int] = {}
    anchors: list[tuple[str, str, str]] = []  # (page path, fragment, linked from)
    ids: dict[str, set[str]] = {}
    queue = [urlsplit(base).path]
    seen = set(queue)
    while queue:
        path = queue.pop(0)
        url = urljoin(base, path)
        page = browser.render(url)
        parsed = _Links()
        parsed.feed(page.html)
        result.rendered[path] = page.html
        ids[path] = parsed.ids
        for requested in page.requested:
            parts = urlsplit(requested)
            if parts.scheme in ("http", "https", "ws", "wss") and parts.netloc != host:
                result.problems.append(Problem("external-request", path, requested))
        for failed, status in page.failed:
            result.problems.append(Problem("failed-request", path, f"{failed} -> {status}"))
        for failed, reason in page.unreachable:
            if urlsplit(failed).netloc == host:
                result.problems.append(Problem("failed-request", path, f"{failed}: {reason}"))
        if not parsed.has_article:
            result.problems.append(Problem("empty-page", path, "no main content (article)"))
        elif not "".join(parsed.main_text).strip():
            result.problems.append(Problem("empty-page", path, "the main content is empty"))
        for link in parsed.links:
            target, fragment = urldefrag(urljoin(url, link))
            parts = urlsplit(target)
            if parts.scheme not in ("http", "https") or parts.netloc != host:
                continue  # mailto:, data:, and other sites (their requests are checked above)
            if target not in statuses:
                statuses[target] = _status(target)
            if statuses[target] != 200:
                result.problems.append(
                    Problem("broken-link", path, f"{link} -> {statuses[target]}")
                )
                continue
            key = _page_key(parts.path)
            if fragment and _is_page(parts.path):
                anchors.append((key, fragment, path))
            if _is_page(parts.path) and key not in seen and follow(key):
                seen.add(key)
                queue.append(key)
    for page_path, fragment, source in anchors:
        if fragment not in ids.get(page_path, set()):
            result.problems.append(
                Problem("missing-anchor", source, f"{page_path}#{fragment} has no such id")
            )
    for missing in sorted(nav_pages - set(result.rendered)):
        result.problems.append(Problem("not-reached", missing, "in the nav, but no link led here"))
    return result
