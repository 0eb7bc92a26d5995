"""python -m kvpool.conformance.tools.bench.profile: the shares of our manager's time."""

from __future__ import annotations

import pstats

import pytest
from kvpool.conformance.tools.bench import profile


def test_the_shares_name_where_the_steps_spent_their_time() -> None:
    found = dict(profile.shares(profile.profile(200, 300, "requests")))
    assert set(found) == {label for label, _ in profile.SHARES}
    assert all(0.0 <= share <= 1.0 for share in found.values())
    # every step hashes or looks up: both shares are there, the hashing within the lookup's
    assert found["hashing the tokens"] > 0.0
    assert found["the prefix lookup (with its hashing)"] > 0.0


def test_the_command_prints_a_share_table_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert profile.main(["200", "--steps", "100", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "requests @ 200 blocks, 100 steps, vLLM 0.33.0's hashing:" in out
    assert "hashing the tokens" in out
    # the release's hashing runs its own path; the spec's hashing, the spec's
    assert "_extend_release_hashes" in _functions(profile.profile(200, 100, "requests"))
    spec = _functions(profile.profile(200, 100, "requests", spec_hashing=True))
    assert "hash_token_blocks" in spec and "_extend_release_hashes" not in spec
    assert profile.main(["200", "--steps", "100", "--spec-hashing"]) == 0
    assert "requests @ 200 blocks, 100 steps, the spec's hashing:" in capsys.readouterr().out


def _functions(stats: pstats.Stats) -> set[str]:
    return {key[2] for key in stats.stats}  # type: ignore[attr-defined]


def test_the_command_refuses_a_pool_too_small() -> None:
    with pytest.raises(SystemExit) as exit_info:
        profile.main(["10"])
    assert exit_info.value.code == 2
