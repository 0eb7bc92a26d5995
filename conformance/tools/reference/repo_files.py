"""Files of the repository published with the site, at the same paths: the findings'
trace files (``findings/TARGET/*.itf.json``) and request sequences (``validate-*.jsonl``),
so that the findings page's links open them in the site as they do in the repository.

The project declares no repository URL (no ``repo_url`` in mkdocs.yml, no project URL in
pyproject.toml), so nothing can link to a hosted copy; a page links a published file
with the path it has in the repository, relative to the page's own source
(``../findings/...`` from ``docs/findings.md``), which works when the Markdown is read in
the repository, and the docs hook rewrites that link to the copy in the site.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

#: The repository folders whose files the site publishes, and the files taken from each.
PUBLISHED = (("findings", "*.itf.json"), ("findings", "validate-*.jsonl"))

#: A Markdown link target (inside ``](...)``) that climbs out of ``docs/``.
_LINK = re.compile(r"\]\(((?:\.\./)+[^)\s#]+)(#[^)\s]*)?\)")


def published_files(root: Path) -> dict[str, Path]:
    """Site path (the path in the repository) -> the file, for every published file under
    the repository ``root``, in sorted order."""
    out: dict[str, Path] = {}
    for folder, pattern in PUBLISHED:
        for path in sorted((root / folder).rglob(pattern)):
            out[path.relative_to(root).as_posix()] = path
    return out


def site_links(markdown: str, page_path: str, published: set[str]) -> str:
    """``markdown`` (of the page at ``page_path`` under ``docs/``) with each link to a
    published repository file rewritten to its copy in the site; any other link is left
    as it is (mkdocs' own checks judge it)."""
    here = posixpath.dirname(page_path)

    def rewrite(match: re.Match[str]) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        in_repo = posixpath.normpath(posixpath.join("docs", here, target))
        if in_repo not in published:
            return match.group(0)
        return f"]({posixpath.relpath(in_repo, here or '.')}{anchor})"

    return _LINK.sub(rewrite, markdown)
