"""The docs site's mkdocs hooks (``hooks:`` in mkdocs.yml): the reference pages generated from
the spec, the nav entries of every operation page, and the ``<!-- kvpool:NAME -->`` markers.

mkdocs loads this file by its path, so it imports everything by absolute name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvpool.conformance.reference.fragments import UnknownMarker, expand
from kvpool.conformance.reference.pages import (
    OPERATIONS_INDEX,
    operation_nav,
    reference_builders,
)
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page


def expand_operations(nav: list[Any]) -> bool:
    """Replace the nav entry of :data:`OPERATIONS_INDEX` (``- Title: path`` or a bare
    path) by a section holding it and one entry per operation. Whether it was found."""
    for i, item in enumerate(nav):
        if item == OPERATIONS_INDEX:
            nav[i] = {"Pool operations": operation_nav()}
            return True
        if isinstance(item, dict):
            for title, value in item.items():
                if value == OPERATIONS_INDEX:
                    item[title] = operation_nav()
                    return True
                if isinstance(value, list) and expand_operations(value):
                    return True
    return False


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Expand the operations entry of the nav; fail the build when it is missing."""
    nav = config.nav
    if nav is None or not expand_operations(nav):
        raise PluginError(
            f"mkdocs.yml: the nav must list {OPERATIONS_INDEX}; the kvpool hook puts every "
            "operation's page under it"
        )
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every generated reference page; a file of the same name in docs/ is an error
    (generated pages are never committed, so they cannot drift)."""
    builders = reference_builders()
    for path in builders:
        if files.get_file_from_path(path) is not None:
            raise PluginError(
                f"docs/{path} exists, but the kvpool hook generates it from the spec: "
                "delete the file"
            )
    for path, build in builders.items():
        files.append(File.generated(config, path, content=build()))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace every ``<!-- kvpool:NAME -->`` marker; an unknown one fails the build."""
    try:
        return expand(markdown, page.file.src_uri, Path(config.docs_dir))
    except UnknownMarker as exc:
        raise PluginError(str(exc)) from exc
