"""Every page of the site states kvpool-spec's version (pyproject's) and links the
changelog, whose page is the repository's CHANGELOG.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kvpool.conformance.tools.reference.site_version import (
    VersionMissing,
    footer,
    project_version,
)

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r'kvpool-spec (?P<version>[^ <]+) · <a href="(?P<href>[^"]+)">Changelog</a>')


def footer_problems(site: Path, version: str) -> list[str]:
    """Each page of ``site`` whose footer lacks the version or whose changelog link does
    not reach the changelog page."""
    problems = []
    changelog = (site / "changelog" / "index.html").resolve()
    for page in sorted(site.rglob("*.html")):
        name = str(page.relative_to(site))
        found = LINK.search(page.read_text(encoding="utf-8"))
        if found is None:
            problems.append(f"{name}: no version in the footer")
            continue
        if found["version"] != version:
            problems.append(f"{name}: states {found['version']}, pyproject says {version}")
        target = (page.parent / found["href"]).resolve()
        if target.is_dir():
            target = target / "index.html"
        if target != changelog:
            problems.append(f"{name}: the changelog link goes to {found['href']}")
    return problems


def test_every_page_states_the_version_and_links_the_changelog(built_site: Path) -> None:
    assert footer_problems(built_site, project_version(ROOT)) == []


def test_the_changelog_page_is_the_repositorys_changelog(built_site: Path) -> None:
    page = (built_site / "changelog" / "index.html").read_text(encoding="utf-8")
    first = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").splitlines()[2]
    assert " ".join(first.split()[:6]) in page


def test_a_page_without_the_footer_or_with_a_wrong_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "changelog").mkdir()
    (tmp_path / "changelog" / "index.html").write_text(footer("9.9", "./"))
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "index.html").write_text("<footer></footer>")
    (tmp_path / "index.html").write_text(footer("9.8", "guide/"))
    assert footer_problems(tmp_path, "9.9") == [
        "guide/index.html: no version in the footer",
        "index.html: states 9.8, pyproject says 9.9",
        "index.html: the changelog link goes to guide/",
    ]


def test_a_pyproject_without_a_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(VersionMissing, match="states no version"):
        project_version(tmp_path)
