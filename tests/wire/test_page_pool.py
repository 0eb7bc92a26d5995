"""The wire protocol page's ``tinypool.py`` passes as written, over protocol 2; with a
fault planted it fails, and the shrinker's replays reach it in batches."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.reference.examples import find_fences

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "wire-protocol.md"


def page_pool(folder: Path, planted: tuple[str, str] | None = None) -> list[str]:
    """The page's pool saved in ``folder`` (with ``planted``: one text replaced by
    another), and the arguments of the page's command that runs it."""
    fences = find_fences(PAGE.read_text(encoding="utf-8"), "wire-protocol.md")
    (index,) = [i for i, f in enumerate(fences) if f.title == "tinypool.py"]
    source = fences[index].body
    if planted is not None:
        assert planted[0] in source
        source = source.replace(*planted)
    (folder / "tinypool.py").write_text(source, encoding="utf-8")
    command = fences[index + 1].body.strip().removeprefix("$ ")
    args = shlex.split(command)[1:]
    program = f"exec,timeout=60:{sys.executable} {folder / 'tinypool.py'}"
    return [program if a == "exec:python3 tinypool.py" else a for a in args]


def test_the_page_pool_passes_as_written(tmp_path: Path) -> None:
    args = page_pool(tmp_path)
    assert args[:2] == ["conform", "--target"]
    result = CliRunner().invoke(main, [*args, "--seed", "1", "--no-coverage"])
    assert result.exit_code == 0, result.output


def test_a_fault_planted_in_the_page_pool_is_shrunk_over_batches(
    tmp_path: Path, sends: list[str]
) -> None:
    args = page_pool(tmp_path, ("free[:0] = reached", "free.extend(reached)"))
    result = CliRunner().invoke(
        main, [*args, "--seed", "1", "--no-coverage", "--level", "order", "--max-findings", "1"]
    )
    assert result.exit_code == 1, result.output
    assert "free_queue" in result.output or "free queue" in result.output, result.output
    assert "batch" in sends  # the shrinker's replays
