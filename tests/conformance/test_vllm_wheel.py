"""The wheel cache: hostile wheels are refused, only the block-pool files are kept, version
strings are checked, and an offline machine is told exactly what to run."""

from __future__ import annotations

import json
import os
import re
import stat
import time
import warnings
import zipfile
from pathlib import Path

import pytest
from fake_index import forget_downloads  # pytest puts this folder on sys.path
from kvpool.conformance.bounds import MAX_RELEASE_MEMBER_BYTES
from kvpool.conformance.engines.vllm.distribution import (
    VLLM_DISTRIBUTION,
    WheelError,
    seed_cache,
    wheel_version,
)
from kvpool.conformance.engines.vllm.releases import (
    ReleaseError,
    check_supported,
    parse_version,
    version_in_tree,
)
from kvpool.conformance.targets.loading import TargetLoadError, choose_profile, load_target
from kvpool.conformance.targets.releases.files import (
    MANIFEST,
    ReleaseFilesError,
    cache_root,
    valid_cache,
)
from kvpool.conformance.targets.releases.files import extract_members as extract

NAME = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
GOOD = {
    "vllm/v1/core/block_pool.py": "class BlockPool: ...\n",
    "vllm/v1/core/kv_cache_utils.py": "X = 1\n",
    "vllm/distributed/kv_events.py": "Y = 2\n",
    "vllm/envs.py": "Z = 3\n",
    "vllm/_version.py": "__version__ = version = '0.33.0'\n",
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("KVPOOL_CACHE_DIR", str(cache))
    return cache


def extract_members(wheel: Path) -> dict[str, bytes]:
    """The loader's reader over vLLM's pool members."""
    return extract(wheel, VLLM_DISTRIBUTION.files())


def make_wheel(path: Path, members: dict[str, str | bytes], symlinks: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            if name in symlinks:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return path


def test_only_the_block_pool_files_are_extracted_with_a_manifest(tmp_path: Path) -> None:
    extra: dict[str, str | bytes] = {
        **GOOD,
        "vllm/__init__.py": "import torch\n",
        "vllm/v1/core/sched/scheduler.py": "x\n",
        "vllm-0.33.0.dist-info/METADATA": "Version: 0.33.0\n",
    }
    wheel = make_wheel(tmp_path / NAME, extra)
    where = seed_cache(wheel)
    assert where == cache_root() / "vllm" / "0.33.0"
    kept = sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file())
    assert kept == sorted([*GOOD, MANIFEST])
    manifest = json.loads((where / MANIFEST).read_text())
    assert manifest["version"] == "0.33.0" and manifest["wheel"] == NAME
    assert len(manifest["wheel_sha256"]) == 64 and sorted(manifest["files"]) == sorted(GOOD)
    assert wheel.exists()  # the caller's file is left alone
    assert valid_cache(where, VLLM_DISTRIBUTION.files(), "0.33.0")
    (where / "vllm/envs.py").write_text("Z = 4\n")  # tampered with: not trusted any more
    assert not valid_cache(where, VLLM_DISTRIBUTION.files(), "0.33.0")
    seed_cache(wheel)  # seeding again repairs it
    assert valid_cache(where, VLLM_DISTRIBUTION.files(), "0.33.0")


@pytest.mark.parametrize(
    "members",
    [
        {
            **{k: v for k, v in GOOD.items() if "block_pool" not in k},
            "../vllm/v1/core/block_pool.py": "x",
        },
        {
            **{k: v for k, v in GOOD.items() if "block_pool" not in k},
            "/vllm/v1/core/block_pool.py": "x",
        },
        {
            **{k: v for k, v in GOOD.items() if "block_pool" not in k},
            "vllm/v1/core/../core/block_pool.py": "x",
        },
    ],
    ids=["dot-dot", "absolute", "dot-dot-inside"],
)
def test_paths_outside_the_allowed_names_are_never_taken(
    tmp_path: Path, members: dict[str, str | bytes], _private_cache: Path
) -> None:
    wheel = make_wheel(tmp_path / NAME, members)
    with pytest.raises(WheelError, match=re.escape("lacks vllm/v1/core/block_pool.py")):
        seed_cache(wheel)
    assert not (tmp_path / "vllm").exists()
    assert not list(_private_cache.rglob("*.py"))


def test_a_symlink_member_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / NAME, {**GOOD, "vllm/envs.py": "/etc/passwd"}, ("vllm/envs.py",))
    with pytest.raises(ReleaseFilesError, match=re.escape("vllm/envs.py is not a regular file")):
        extract_members(wheel)


def test_a_member_listed_twice_is_refused(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
        wheel = make_wheel(tmp_path / NAME, GOOD)
        with zipfile.ZipFile(wheel, "a") as archive:
            archive.writestr("vllm/envs.py", "Z = 'second'\n")
    with pytest.raises(ReleaseFilesError, match="appears twice"):
        extract_members(wheel)


def test_an_oversized_member_is_refused(tmp_path: Path) -> None:
    huge = b"#" * (MAX_RELEASE_MEMBER_BYTES + 1)  # compresses to a few kB
    wheel = make_wheel(tmp_path / NAME, {**GOOD, "vllm/envs.py": huge})
    with pytest.raises(ReleaseFilesError, match="over the limit"):
        extract_members(wheel)


def test_a_file_that_is_not_a_zip_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / NAME
    bogus.write_bytes(b"not a zip")
    with pytest.raises(ReleaseFilesError, match="not a readable wheel"):
        extract_members(bogus)


def test_wheel_names_and_versions() -> None:
    assert wheel_version(Path(NAME)) == "0.33.0"
    assert wheel_version(Path("vllm-0.10.1.1-cp38-abi3-manylinux1_x86_64.whl")) == "0.10.1.1"
    assert wheel_version(Path("vllm-0.23.0-2-cp38-abi3-manylinux_2_28_x86_64.whl")) == "0.23.0"
    with pytest.raises(WheelError, match="not named like a vLLM wheel"):
        wheel_version(Path("torch-2.0-cp311-cp311-linux_x86_64.whl"))
    assert parse_version("0.33.0") == (0, 33, 0)
    assert parse_version("0.27") == (0, 27, 0)
    assert parse_version("0.8.5.post1") == (0, 8, 5)
    assert parse_version("0.10.1.1") == (0, 10, 1, 1)
    assert parse_version("0.34.0rc1") == (0, 34, 0)
    for bad in ("", "latest", "0.33.0; rm -rf /", "v0.33.0", "0.33.x", "../0.33.0", ">=0.30"):
        with pytest.raises(ReleaseError, match="not a vLLM release number"):
            parse_version(bad)
    with pytest.raises(ReleaseError, match=re.escape("older than 0.10.1")):
        check_supported("0.9.2")
    check_supported("0.10.1")


@pytest.mark.parametrize("bad", ["latest", "0.33.0 ", "0.33.0/../../x", "0.9.2"])
def test_a_bad_version_is_a_clear_target_error(bad: str) -> None:
    with pytest.raises(TargetLoadError, match=r"vLLM release number|older than 0.10.1"):
        load_target(f"vllm=={bad}")


def test_the_cache_directory_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KVPOOL_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("KVPOOL_CACHE_DIR")
    assert cache_root() == tmp_path / "xdg" / "kvpool"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "kvpool"


def test_offline_and_not_cached_says_exactly_what_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # No configured index or link is reachable: pip fails, and the error tells the way out.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    forget_downloads(monkeypatch)
    start = time.monotonic()
    with pytest.raises(TargetLoadError) as info:
        load_target("vllm==0.33.0")
    message = str(info.value)
    assert "could not download vLLM 0.33.0 with pip" in message
    assert "pip download --no-deps --only-binary=:all: vllm==0.33.0 -d DIR" in message
    assert "--target vllm@DIR/vllm-0.33.0-<tags>.whl" in message
    assert "vllm@PATH" in message
    assert "  | " in message  # pip's own last lines are shown
    assert time.monotonic() - start < 60


def test_a_wheel_file_as_target_seeds_the_cache(tmp_path: Path, _private_cache: Path) -> None:
    wheel = make_wheel(tmp_path / NAME, GOOD)
    with pytest.raises(TargetLoadError, match="vllm@"):
        load_target(f"vllm@{wheel}")  # a stand-in wheel has no real pool to load
    assert valid_cache(_private_cache / "vllm" / "0.33.0", VLLM_DISTRIBUTION.files(), "0.33.0")


def test_the_profile_chosen_for_each_target_form(tmp_path: Path) -> None:
    assert choose_profile("impl").name == "seed"
    assert choose_profile("spec").name == "seed"
    assert choose_profile("mypkg.pool:make").name == "seed"
    assert choose_profile("vllm==0.33.0").name == "vllm-0.33"
    assert choose_profile("vllm==0.27.1").name == "vllm-0.27"
    assert choose_profile("vllm==0.10.2").name == "vllm-0.10"
    assert choose_profile(f"vllm@{tmp_path / NAME.replace('0.33.0', '0.24.0')}").name == "vllm-0.24"
    make_wheel(tmp_path / NAME, GOOD)
    (tmp_path / "tree" / "vllm").mkdir(parents=True)
    (tmp_path / "tree/vllm/_version.py").write_text("__version__ = version = '0.30.0'\n")
    assert choose_profile(f"vllm@{tmp_path / 'tree'}").name == "vllm-0.30"
    assert version_in_tree(tmp_path) == "unknown"
    with pytest.raises(TargetLoadError, match="not a vLLM source tree"):
        choose_profile(f"vllm@{tmp_path}")  # no version: its code decides, and it has none
    with pytest.raises(TargetLoadError, match=re.escape("older than 0.10.1")):
        choose_profile("vllm==0.9.2")
    with pytest.raises(TargetLoadError, match="not a vLLM release number"):
        choose_profile("vllm==newest")
