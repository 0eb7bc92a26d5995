"""The findings page and the events contract page agree, and the findings page links
every trace file: published with the site at the path it has in the repository."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from kvpool.conformance.tools.reference import events_matrix as matrix_module
from kvpool.conformance.tools.reference.events_matrix import events_matrix
from kvpool.conformance.tools.reference.repo_files import published_files, site_links

ROOT = Path(__file__).resolve().parents[2]


def table_rows(markdown: str, first_header: str) -> dict[str, dict[str, str]]:
    """The Markdown table whose first header is ``first_header``: first cell -> header ->
    cell."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    headers = [h.strip() for h in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = dict(zip(headers, cells, strict=True))
    return rows


def disagreements() -> list[str]:
    """Where the events matrix and the findings page's table say different things of a
    target's events runs."""
    findings = table_rows((ROOT / "docs" / "findings.md").read_text(), "target")
    matrix = table_rows(events_matrix(ROOT / "findings"), "target")
    out = []
    for target, row in matrix.items():
        for consumer in ("count", "set"):
            ours = row[f"{consumer} consumer"]
            theirs = findings[target][f"pool-events-{consumer}"]
            same = (
                (theirs == "no events") == (ours == "no events")
                and (theirs == "pass") == (ours == "passes")
                and ("finding" in theirs) == ours.startswith("fails")
            )
            if not same:
                out.append(f"{target} {consumer}: matrix {ours!r}, findings page {theirs!r}")
    return out


def test_the_events_matrix_says_what_the_findings_page_says() -> None:
    assert not disagreements()


def test_a_target_without_events_counted_as_passing_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The matrix's first source of truth, the trace's profile, said nano-vllm passes."""
    monkeypatch.setattr(matrix_module, "publishes_events", lambda target: True)
    found = disagreements()
    assert "nanovllm-npu-0.0.2 count: matrix 'passes', findings page 'no events'" in found


def test_links_to_published_files_point_at_their_copies_in_the_site() -> None:
    published = {"findings/a/x.itf.json"}
    assert site_links("[t](../findings/a/x.itf.json)", "findings.md", published) == (
        "[t](findings/a/x.itf.json)"
    )
    assert site_links("[t](../../findings/a/x.itf.json#s)", "guide/p.md", published) == (
        "[t](../findings/a/x.itf.json#s)"
    )
    for untouched in ("[t](../findings/a/gone.itf.json)", "[t](guide/x.md)", "[t](../README.md)"):
        assert site_links(untouched, "findings.md", published) == untouched


def test_the_findings_page_links_every_trace_file(built_site: Path) -> None:
    text = html.unescape((built_site / "findings" / "index.html").read_text(encoding="utf-8"))
    linked = set(re.findall(r'(?:Trace|Requests): <a href="([^"]+\.(?:itf\.json|jsonl))"', text))
    traces = {p for p in published_files(ROOT) if p.startswith("findings/")}
    assert traces and {f"findings/{link}" for link in linked} == traces
    for path in traces:
        assert (built_site / path).read_bytes() == (ROOT / path).read_bytes(), path
