"""`kvpool docs examples` finds console examples that drifted, and --refresh rewrites them
with what the command prints today (never one that exits otherwise than the page says)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.reference.cli_page import kvpool_group
from kvpool.conformance.tools.reference.refresh_examples import drifts, refresh

RUN = "kvpool conform --max-examples 2 --seed 1 --machine pool --level safety --no-coverage"
STALE = """# A page

- in a list:

    ```console
    $ {run}
    kvpool conform: an old header
    every run passed
    ```

Text after it.
"""


def test_a_drifted_output_is_found_and_refreshed_in_place(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(STALE.format(run=RUN))
    kvpool = kvpool_group(main)
    (drift,) = refresh(page, "page.md", kvpool, write=True)
    assert drift.where == "page.md:6" and drift.printed is not None
    assert "-kvpool conform: an old header" in drift.diff
    text = page.read_text()
    assert "an old header" not in text and text.endswith("    ```\n\nText after it.\n")
    assert "    │ pool/safety │ pass" in text  # the fence's indentation kept
    assert drifts(page, "page.md", kvpool)[0] == []  # now it reads as what it prints


def test_a_command_that_exits_otherwise_is_reported_not_rewritten(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    stale = "<!-- exit: 1 -->\n" + STALE.split("- in a list:\n\n", 1)[1].format(run=RUN)
    page.write_text(stale)
    (drift,) = refresh(page, "page.md", kvpool_group(main), write=True)
    assert drift.printed is None and "exits 0, the page expects 1" in drift.note
    assert page.read_text() == stale


def test_the_command_exits_1_on_drift_and_0_once_refreshed(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(STALE.format(run=RUN))
    checked = CliRunner().invoke(main, ["docs", "examples", str(page)])
    assert checked.exit_code == 1, checked.output
    assert "drifted" in checked.output and "1 drifted command(s) in 1 page(s)" in checked.output
    refreshed = CliRunner().invoke(main, ["docs", "examples", "--refresh", str(page)])
    assert refreshed.exit_code == 0, refreshed.output
    again = CliRunner().invoke(main, ["docs", "examples", str(page)])
    assert again.exit_code == 0 and "0 drifted command(s)" in again.output
