"""``kvpool profile derive`` measures every knob and writes a file that reproduces each
built-in vLLM profile on its own release's wheel (every knob but the written promises).

By default the releases are those other tests already download (one wheel each, about
400 MB, fetched once into ~/.cache/kvpool); they cover 12 of the 16 vLLM profiles. With
``KVPOOL_DERIVE_ALL=1`` the first release of every profile is measured too (four more
wheels: 0.13.0, 0.22.0, 0.29.0, 0.32.0). Each derivation takes about a second.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.profiles.derive import MANAGER_DESIGN, WRITTEN
from kvpool.spec.profile import VLLM_RELEASES, get_profile, knob_names, profile_for_version

CACHED = ("0.10.2", "0.11.0", "0.12.0", "0.18.0", "0.19.0", "0.23.0", "0.24.0", "0.26.0",
          "0.27.1", "0.30.0", "0.31.0", "0.33.0", "0.34.0")  # fmt: skip
EVERY = tuple(".".join(map(str, first)) for first, _ in VLLM_RELEASES)
RELEASES = sorted(set(CACHED) | (set(EVERY) if os.environ.get("KVPOOL_DERIVE_ALL") else set()))


def derive(target: str, out: Path) -> str:
    result = CliRunner().invoke(main, ["profile", "derive", "--target", target, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text()


#: Designs no vLLM release has; a planted pool shows each probe tell both values apart.
NO_RELEASE_HAS = ("keys_die_on_free", "refuses_by_return", "flushes_under_pressure")


def measured_knobs() -> list[str]:
    return [k for k in knob_names() if k not in WRITTEN and k not in MANAGER_DESIGN]


@pytest.mark.parametrize("version", RELEASES)
def test_derive_reproduces_the_built_in_profile_of_each_release(
    version: str, tmp_path: Path
) -> None:
    text = derive(f"vllm=={version}", tmp_path / "derived.toml")
    assert "# undecided" not in text
    derived = get_profile(str(tmp_path / "derived.toml"))
    built_in = profile_for_version(version)
    differing = [k for k in measured_knobs() if getattr(derived, k) != getattr(built_in, k)]
    assert differing == [], f"{version}: derived differs from {built_in.name} in {differing}"


def test_the_releases_measured_cover_both_values_of_every_knob() -> None:
    # a probe stuck at one value would still reproduce the profiles that share it: the
    # releases measured must disagree on every knob, so each probe is shown to tell
    profiles = [profile_for_version(v) for v in RELEASES] + [get_profile("seed")]
    for knob in measured_knobs():
        if knob in NO_RELEASE_HAS:
            continue  # each shown by a planted pool (below, and in test_knob_*.py)
        assert len({getattr(p, knob) for p in profiles}) > 1, knob


def test_our_pool_derives_as_the_seed(tmp_path: Path) -> None:
    text = derive("impl", tmp_path / "impl.toml")
    assert "[knobs." not in text  # every measured knob as the contract says
    assert "undecided: key_attributes" in text  # no vLLM hasher to measure it on


def test_an_unloadable_target_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["profile", "derive", "--target", "nowhere"])
    assert result.exit_code == 2 and "unknown target" in result.output


def test_a_pool_whose_keys_die_on_free_derives_so_and_passes_its_file(tmp_path: Path) -> None:
    # no vLLM release has this design: a planted one shows the probe and the knob both work
    text = derive("tiered_pool:TieredPool", tmp_path / "tiered.toml")
    assert "[knobs.keys_die_on_free]" in text
    assert text.count("[knobs.") == 1  # everything else as our pool, the seed
    runner = CliRunner()
    run = ["conform", "--target", "tiered_pool:TieredPool", "--seed", "2", "--max-examples", "60"]
    judged = runner.invoke(main, [*run, "--profile", str(tmp_path / "tiered.toml")])
    assert judged.exit_code == 0, judged.output
    by_seed = runner.invoke(main, [*run, "--trace-dir", str(tmp_path / "traces")])
    assert by_seed.exit_code == 1 and "keys" in by_seed.output
