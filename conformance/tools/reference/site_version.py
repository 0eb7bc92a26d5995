"""The version every page of the site states, and the changelog it links.

The version is the one ``pyproject.toml`` of the checkout being built declares (the one
``kvpool --version`` prints once it is installed); the changelog is ``CHANGELOG.md`` at the
repository's root, published on the site as :data:`CHANGELOG_PAGE`. The project has no
public repository, so the footer names the distribution and its version, not a URL.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from .markdown import GENERATED

#: The checkout this module is in (the version and changelog of a site whose own folder
#: has no pyproject.toml: a site built elsewhere with kvpool's hook).
CHECKOUT = Path(__file__).resolve().parents[3]
#: Where the site publishes the repository's CHANGELOG.md.
CHANGELOG_PAGE = "changelog.md"
#: The distribution's name, as the footer states it.
DISTRIBUTION = "kvpool-spec"


class VersionMissing(ValueError):
    """``pyproject.toml`` states no version (the footer would have nothing to say)."""


def repository(docs_dir: Path) -> Path:
    """The repository a site's version and changelog come from: the folder above its docs
    when that is a project (a pyproject.toml), else kvpool's own checkout."""
    here = docs_dir.resolve().parent
    return here if (here / "pyproject.toml").is_file() else CHECKOUT


def project_version(root: Path) -> str:
    """``[project] version`` of ``root/pyproject.toml``."""
    with (root / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file).get("project", {})
    version = project.get("version") if isinstance(project, dict) else None
    if not isinstance(version, str) or not version:
        raise VersionMissing(f"{root / 'pyproject.toml'}: [project] states no version")
    return version


def changelog_page(root: Path) -> str:
    """The site's changelog page: the repository's CHANGELOG.md as it is."""
    return GENERATED.replace("from the spec", "from CHANGELOG.md") + (
        root / "CHANGELOG.md"
    ).read_text(encoding="utf-8")


def footer(version: str, changelog_url: str) -> str:
    """The footer's line (HTML): the distribution, its version and a link to the changelog
    (``changelog_url`` relative to the page it is on)."""
    return f'{DISTRIBUTION} {version} · <a href="{changelog_url}">Changelog</a>'
