"""``kvpool docs``: its help, ``generate``, and ``build`` failing loudly on a bad site."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.reference.command import docs
from kvpool.conformance.tools.reference.fragments import FRAGMENTS
from kvpool.conformance.tools.reference.pages import reference_builders

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "conformance" / "tools" / "reference" / "mkdocs_hook.py"


def test_help_teaches_the_three_commands_and_the_markers() -> None:
    result = CliRunner().invoke(docs, ["--help"])
    assert result.exit_code == 0
    for word in ("build", "serve", "generate", "<!-- kvpool:NAME -->", "--strict"):
        assert word in result.output


def test_generate_writes_every_reference_page(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["docs", "generate", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.md")}
    assert written == set(reference_builders(main))
    # the command-line page is the whole kvpool command's, handed in by the docs command
    assert "### kvpool conform\n" in (tmp_path / "reference" / "cli.md").read_text()
    rules = (tmp_path / "reference" / "rules.md").read_text()
    assert "### free-held" in rules and "do not edit" in rules


def test_generate_lists_the_markers_and_needs_out() -> None:
    listed = CliRunner().invoke(docs, ["generate", "--list-markers"])
    assert listed.exit_code == 0
    assert all(f"<!-- kvpool:{name} -->" in listed.output for name in FRAGMENTS)
    missing = CliRunner().invoke(docs, ["generate"])
    assert missing.exit_code == 2 and "--out" in missing.output


def small_site(root: Path, page: str) -> Path:
    """A two-page mkdocs project using the kvpool hook, whose home page is ``page``."""
    (root / "docs").mkdir()
    (root / "docs" / "index.md").write_text(page)
    (root / "mkdocs.yml").write_text(
        f"site_name: t\nhooks: ['{HOOK}']\n"
        "nav: [index.md, reference/actions/index.md, reference/releases/index.md]\n"
    )
    return root / "mkdocs.yml"


def test_build_fails_on_a_broken_link(tmp_path: Path) -> None:
    config = small_site(tmp_path, "# Home\n\nSee [the missing page](missing.md).\n")
    result = CliRunner().invoke(docs, ["build", "--config", str(config)])
    assert result.exit_code == 5  # a build that failed: undecided
    assert "missing.md" in result.output and "the site did not build" in result.output


def test_build_fails_on_an_unknown_marker(tmp_path: Path) -> None:
    config = small_site(tmp_path, "# Home\n\n<!-- kvpool:lifecycle-diagramm -->\n")
    result = CliRunner().invoke(docs, ["build", "--config", str(config)])
    assert result.exit_code == 5  # a build that failed: undecided
    assert "unknown marker <!-- kvpool:lifecycle-diagramm -->" in result.output


def test_build_needs_a_config(tmp_path: Path) -> None:
    result = CliRunner().invoke(docs, ["build", "--config", str(tmp_path / "nope.yml")])
    assert result.exit_code == 2


def test_serve_previews_the_site() -> None:
    """`kvpool docs serve` answers with the home page and a generated page, then stops."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launch = (
        "import sys; from kvpool.conformance.tools.reference.command import docs; "
        "docs(sys.argv[1:])"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", launch, "serve", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base, timeout=5) as home:
                    assert "kvpool-spec" in home.read().decode()
                    break
            except OSError:
                assert server.poll() is None, "kvpool docs serve exited"
                assert time.monotonic() < deadline, "kvpool docs serve never answered"
                time.sleep(0.5)
        with urllib.request.urlopen(base + "reference/rules/", timeout=10) as rules:
            assert "free-held" in rules.read().decode()
    finally:
        server.terminate()
        server.wait(timeout=30)
