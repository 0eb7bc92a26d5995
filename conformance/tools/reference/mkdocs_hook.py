"""The docs site's mkdocs hooks (``hooks:`` in mkdocs.yml): the reference pages generated from
the spec, the nav entries of every operation page, the ``<!-- kvpool:NAME -->`` markers,
the findings' trace files published with the site, and the check that every Markdown
table renders.

mkdocs loads this file by its path, so it imports everything by absolute name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvpool.conformance.cli import main
from kvpool.conformance.tools.reference.fragments import UnknownMarker, expand
from kvpool.conformance.tools.reference.pages import (
    OPERATIONS_INDEX,
    operation_nav,
    reference_builders,
)
from kvpool.conformance.tools.reference.releases_page import RELEASES_INDEX, releases_nav
from kvpool.conformance.tools.reference.repo_files import published_files, site_links
from kvpool.conformance.tools.reference.site_version import (
    CHANGELOG_PAGE,
    changelog_page,
    footer,
    project_version,
    repository,
)
from kvpool.conformance.tools.reference.table_check import malformed_tables
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url


def expand_section(nav: list[Any], index: str, title: str, section: list[Any]) -> bool:
    """Replace the nav entry of ``index`` (``- Title: path`` or a bare path) by ``section``
    (the index, then one entry per generated page). Whether it was found."""
    for i, item in enumerate(nav):
        if item == index:
            nav[i] = {title: section}
            return True
        if isinstance(item, dict):
            for key, value in item.items():
                if value == index:
                    item[key] = section
                    return True
                if isinstance(value, list) and expand_section(value, index, title, section):
                    return True
    return False


def expand_operations(nav: list[Any]) -> bool:
    """Expand :data:`OPERATIONS_INDEX` into every operation's page."""
    return expand_section(nav, OPERATIONS_INDEX, "Pool operations", operation_nav())


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Expand the operations and releases entries of the nav (fail the build when one is
    missing); state the version in the footer."""
    nav = config.nav
    for index, title, section, what in (
        (OPERATIONS_INDEX, "Pool operations", operation_nav(), "operation"),
        (RELEASES_INDEX, "vLLM releases", releases_nav(), "release generation"),
    ):
        if nav is None or not expand_section(nav, index, title, section):
            raise PluginError(
                f"mkdocs.yml: the nav must list {index}; the kvpool hook puts every {what}'s "
                "page under it"
            )
    # the footer of the pages that are not a page of the nav (404.html, at the root);
    # on_page_context sets each page's own
    version = project_version(repository(Path(config.docs_dir)))
    config.copyright = footer(version, files_url(CHANGELOG_PAGE, config))
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every generated reference page (a file of the same name in docs/ is an error:
    generated pages are never committed, so they cannot drift) and the repository files
    the site publishes at their repository paths (the findings' traces)."""
    builders = reference_builders(main)
    root = repository(Path(config.docs_dir))
    builders[CHANGELOG_PAGE] = lambda: changelog_page(root)
    for path in builders:
        if files.get_file_from_path(path) is not None:
            raise PluginError(
                f"docs/{path} exists, but the kvpool hook generates it: delete the file"
            )
    for path, build in builders.items():
        files.append(File.generated(config, path, content=build()))
    for path, source in published_files(Path(config.docs_dir).parent).items():
        files.append(File.generated(config, path, content=source.read_bytes()))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace every ``<!-- kvpool:NAME -->`` marker (an unknown one fails the build), point
    links to published repository files (the findings' traces) at their copies in the
    site, and fail the build on a table that would not render as written (in the page or
    a fragment it includes)."""
    try:
        expanded = expand(markdown, page.file.src_uri, Path(config.docs_dir))
    except UnknownMarker as exc:
        raise PluginError(str(exc)) from exc
    published = set(published_files(Path(config.docs_dir).parent))
    expanded = site_links(expanded, page.file.src_uri, published)
    problems = malformed_tables(expanded)
    if problems:
        uri = page.file.src_uri
        where = f"{uri} (generated)" if page.file.generated_by else f"docs/{uri}"
        raise PluginError(
            f"{where}: a malformed Markdown table (lines of the page after its markers are "
            "expanded):\n  " + "\n  ".join(problems)
        )
    return expanded


def on_page_context(
    context: dict[str, Any], page: Page, config: MkDocsConfig, nav: Any
) -> dict[str, Any]:
    """State the version and link the changelog in the footer of every page (the theme
    prints ``copyright``), the link relative to the page, so the site works from any
    folder."""
    changelog = files_url(CHANGELOG_PAGE, config)
    version = project_version(repository(Path(config.docs_dir)))
    config.copyright = footer(version, get_relative_url(changelog, page.url or "."))
    return context


def files_url(path: str, config: MkDocsConfig) -> str:
    """The URL mkdocs gives the page at ``path`` (``changelog/`` with directory URLs)."""
    return File(path, config.docs_dir, config.site_dir, config.use_directory_urls).url
