"""The step profiler splits a run's time by who called whom: a target whose view is slow
shows as the view's part, and the parts stay within the whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kvpool.conformance.machines.pool.step_profile import main
from kvpool.impl import BlockPool

HERE = Path(__file__).parent
VIEW = "target: its view, less the index probe"


class SlowCountPool(BlockPool):
    """Counts its free blocks the slow way: the adapter asks for the count in every view."""

    def get_num_free_blocks(self) -> int:
        total = 0
        for i in range(20_000):  # planted: busy work on every view
            total += i & 1
        return super().get_num_free_blocks() + total * 0


def profiled(capsys: pytest.CaptureFixture[str], target: str) -> dict[str, tuple[float, int]]:
    """Each part's seconds and share, as the profiler prints them."""
    main(["--target", target, "--max-examples", "15"])
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (.+?) \| ([\d.]+) \| \d+ \| (\d+)% \|$", out, re.M)
    return {name: (float(seconds), int(share)) for name, seconds, share in rows}


def test_a_slow_view_shows_as_the_views_part(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    planted = profiled(capsys, "test_step_profile:SlowCountPool")
    whole, _ = planted.pop("exploring, in all")
    assert max(planted, key=lambda part: planted[part][1]) == VIEW, planted
    assert planted[VIEW][1] >= 50, planted
    # the parts are disjoint: together they are the whole (each printed to 0.01 s)
    assert sum(seconds for seconds, _ in planted.values()) <= whole + 0.01 * len(planted)
    # the control: the same run on the pool itself spends far less of its time there
    assert profiled(capsys, "impl")[VIEW][1] < 40
