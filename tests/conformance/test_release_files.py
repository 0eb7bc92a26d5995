"""The one loader of engine releases: every engine's files go through the same pip
download, the same cache layout and manifest, the same wheel reader with the same limits
and the same messages. A fake index (a folder of real, tiny wheels that pip alone is
pointed at) stands in for the package index: nothing here reaches the network."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from fake_index import point_pip_at  # pytest puts this folder on sys.path
from kvpool.conformance.bounds import MAX_RELEASE_MEMBER_BYTES
from kvpool.conformance.engines.lmdeploy import manager_release
from kvpool.conformance.engines.lmdeploy import release as lmdeploy_release
from kvpool.conformance.engines.nanovllm import release as nanovllm_release
from kvpool.conformance.engines.sglang import scheduler_release_0_4 as sglang_scheduler
from kvpool.conformance.engines.vllm.distribution import VLLM_DISTRIBUTION
from kvpool.conformance.engines.vllm_mlx.pool import FILES as VLLM_MLX_FILES
from kvpool.conformance.targets.releases import files as release_files
from kvpool.conformance.targets.releases.files import (
    MANIFEST,
    ReleaseFiles,
    ReleaseFilesError,
    cached_files,
    extract_members,
    release_dir,
    seed_cache,
    valid_cache,
)

POOL = "fakeengine/pool.py"
FAKE = ReleaseFiles("fakeengine", "fakeengine", frozenset({POOL}), label="Fake", engine="fake")

#: One ReleaseFiles of every engine the suite loads.
EVERY_ENGINE = {
    "vllm": VLLM_DISTRIBUTION.files(),
    "lmdeploy": lmdeploy_release.FILES,
    "lmdeploy-prefill-scheduler": manager_release.FILES,
    "nanovllm": nanovllm_release.files_of("nanovllm"),
    "sglang": sglang_scheduler.scheduler_files(),
    "vllm-mlx": VLLM_MLX_FILES,
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("KVPOOL_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def fake_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip sees only this folder (no index, no configuration, no other links)."""
    return point_pip_at(tmp_path / "index", monkeypatch)


def make_wheel(
    folder: Path,
    project: str,
    version: str,
    members: dict[str, bytes],
    tags: str = "py3-none-any",
    symlinks: tuple[str, ...] = (),
) -> Path:
    """A wheel pip accepts: the members, its METADATA, WHEEL and RECORD."""
    dist = f"{project}-{version}.dist-info"
    files = {
        **members,
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n".encode()
        ),
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tags}\n".encode(),
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    path = folder / f"{project}-{version}-{tags}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            kind = stat.S_IFLNK if name in symlinks else stat.S_IFREG
            info.external_attr = (kind | 0o644) << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return path


def test_a_release_is_downloaded_once_through_pip_and_kept_with_its_manifest(
    fake_index: Path, _private_cache: Path
) -> None:
    wheel = make_wheel(
        fake_index, "fakeengine", "1.0", {POOL: b"X = 1\n", "fakeengine/big.py": b"#"}
    )
    where = cached_files(FAKE, "1.0")
    assert where == _private_cache / "fakeengine" / "1.0" == release_dir(FAKE, "1.0")
    assert sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file()) == [
        POOL,
        MANIFEST,
    ]
    manifest = json.loads((where / MANIFEST).read_text())
    assert manifest["wheel"] == wheel.name and manifest["version"] == "1.0"
    assert manifest["wheel_sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    wheel.unlink()  # the index loses it: the cache alone serves from now on
    assert cached_files(FAKE, "1.0") == where
    (where / POOL).write_text("X = 2\n")  # a changed file invalidates the cache
    assert not valid_cache(where, FAKE, "1.0")


def test_each_release_is_downloaded_once_for_all_the_files_kept_of_it(
    fake_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's files and then the manager's (two cache folders) from one download; the
    next release's download drops the kept wheel."""
    from kvpool.conformance.targets.releases import download

    fetched: list[str] = []
    real = download.download_wheel

    def counted(files: ReleaseFiles, version: str, dest: Path, cached_at: Path) -> Path:
        fetched.append(f"{files.project}=={version}")
        return real(files, version, dest, cached_at)

    monkeypatch.setattr(download, "download_wheel", counted)
    manager = ReleaseFiles("fakeengine-manager", "fakeengine", frozenset({"fakeengine/mgr.py"}))
    members = {POOL: b"X = 1\n", "fakeengine/mgr.py": b"Y = 1\n"}
    first = make_wheel(fake_index, "fakeengine", "3.0", members)
    make_wheel(fake_index, "fakeengine", "4.0", members)
    cached_files(FAKE, "3.0")
    first.unlink()  # gone from the index: the manager's files must come from the kept wheel
    assert (cached_files(manager, "3.0") / "fakeengine/mgr.py").read_bytes() == b"Y = 1\n"
    assert fetched == ["fakeengine==3.0"]
    kept = release_files.LAST_WHEEL.get("fakeengine", "3.0")  # the one fake_index set
    assert kept is not None
    cached_files(FAKE, "4.0")
    assert fetched == ["fakeengine==3.0", "fakeengine==4.0"]
    assert not kept.exists() and release_files.LAST_WHEEL.get("fakeengine", "3.0") is None


def test_a_wheel_for_other_pythons_only_is_found_by_the_fallback(fake_index: Path) -> None:
    """An engine that publishes cp310 manylinux wheels only: its pure-Python members serve."""
    make_wheel(
        fake_index, "fakeengine", "2.0", {POOL: b"X = 1\n"}, tags="cp310-cp310-manylinux1_x86_64"
    )
    assert (cached_files(FAKE, "2.0") / POOL).read_bytes() == b"X = 1\n"


def test_a_release_the_index_lacks_is_one_clear_error(fake_index: Path) -> None:
    """pip itself, asked for every platform the downloader tries."""
    with pytest.raises(ReleaseFilesError) as info:
        cached_files(FAKE, "9.9.9")
    message = str(info.value)
    assert message.startswith("could not download Fake 9.9.9 with pip:\n  | ")
    assert "No matching distribution found for fakeengine==9.9.9" in message
    assert "pip download --no-deps --only-binary=:all: fakeengine==9.9.9 -d DIR" in message


@pytest.mark.parametrize("engine", sorted(EVERY_ENGINE))
def test_every_engine_says_the_same_when_the_download_fails(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's answer stood in for (the real one is above), so that every engine's message
    is checked in a moment: pip's last line, the cache, the commands to run by hand."""
    asked: list[list[str]] = []

    def refused(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        asked.append(command)
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution\n")

    monkeypatch.setattr(subprocess, "run", refused)
    files = EVERY_ENGINE[engine]
    with pytest.raises(ReleaseFilesError) as info:
        cached_files(files, "9.9.9")
    message = str(info.value)
    assert message.startswith(
        f"could not download {files.shown} 9.9.9 with pip:\n  | ERROR: No matching distribution\n"
    )
    assert f"pip download --no-deps --only-binary=:all: {files.project}==9.9.9 -d DIR" in message
    assert str(release_dir(files, "9.9.9")) in message
    assert all(f"{files.project}==9.9.9" in command for command in asked)
    assert len(asked) == 5  # this interpreter's wheel, then four other CPythons'


@pytest.mark.parametrize("engine", sorted(EVERY_ENGINE))
def test_every_engine_has_the_same_member_limit(engine: str, tmp_path: Path) -> None:
    files = EVERY_ENGINE[engine]
    member = sorted(files.members)[0]
    huge = b"#" * (MAX_RELEASE_MEMBER_BYTES + 1)  # compresses to a few kB
    wheel = make_wheel(tmp_path, files.wheel_prefix, "1.0", {member: huge})
    with pytest.raises(ReleaseFilesError, match=f"{member} is {len(huge)} bytes, over the limit"):
        extract_members(wheel, files)


@pytest.mark.parametrize("engine", sorted(EVERY_ENGINE))
def test_every_engine_refuses_a_symlink_member(engine: str, tmp_path: Path) -> None:
    files = EVERY_ENGINE[engine]
    member = sorted(files.members)[0]
    wheel = make_wheel(
        tmp_path, files.wheel_prefix, "1.0", {member: b"/etc/passwd"}, symlinks=(member,)
    )
    with pytest.raises(ReleaseFilesError, match=f"{member} is not a regular file"):
        extract_members(wheel, files)


def test_a_wheel_lacking_a_required_member_is_refused_and_nothing_is_cached(
    tmp_path: Path, _private_cache: Path
) -> None:
    wheel = make_wheel(tmp_path, "lmdeploy", "0.18.0", {lmdeploy_release.VERSION_FILE: b"v"})
    with pytest.raises(ReleaseFilesError, match=f"lacks {lmdeploy_release.FILE}"):
        seed_cache(wheel, lmdeploy_release.FILES)
    assert not list(_private_cache.rglob("*.py"))


def test_caches_written_before_the_one_loader_stay_valid(_private_cache: Path) -> None:
    """The manifests the former vLLM and engine caches wrote (no 'distribution' in vLLM's)
    are read as they are: no release is fetched again."""
    data = b"X = 1\n"
    digest = hashlib.sha256(data).hexdigest()
    old_vllm = {
        "version": "0.33.0",
        "wheel": "vllm-0.33.0-cp38-abi3-manylinux1_x86_64.whl",
        "wheel_sha256": "0" * 64,
        "files": {name: digest for name in VLLM_DISTRIBUTION.files().needed},
    }
    old_engine = {
        "distribution": "lmdeploy",
        "version": "0.18.0",
        "wheel": "lmdeploy-0.18.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "wheel_sha256": "0" * 64,
        "files": {name: digest for name in lmdeploy_release.FILES.members},
    }
    for files, manifest in (
        (VLLM_DISTRIBUTION.files(), old_vllm),
        (lmdeploy_release.FILES, old_engine),
    ):
        where = release_dir(files, manifest["version"])
        for name in manifest["files"]:
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            (where / name).write_bytes(data)
        (where / MANIFEST).write_text(json.dumps(manifest))
        assert valid_cache(where, files, manifest["version"])
        assert cached_files(files, manifest["version"], download=False) == where


def test_a_manifest_missing_a_required_file_is_not_a_cache(_private_cache: Path) -> None:
    files = VLLM_DISTRIBUTION.files()
    where = release_dir(files, "0.33.0")
    where.mkdir(parents=True)
    kept = sorted(files.needed)[0]
    (where / kept).parent.mkdir(parents=True, exist_ok=True)
    (where / kept).write_bytes(b"x")
    digest = hashlib.sha256(b"x").hexdigest()
    (where / MANIFEST).write_text(json.dumps({"version": "0.33.0", "files": {kept: digest}}))
    assert not valid_cache(where, files, "0.33.0")
    with pytest.raises(ReleaseFilesError, match="is not in the cache"):
        cached_files(files, "0.33.0", download=False)


def test_vllm_mlx_moves_from_its_old_single_file_to_the_shared_layout(
    fake_index: Path, _private_cache: Path
) -> None:
    old = _private_cache / "vllm-mlx" / "0.6.0" / "paged_cache.py"  # the former layout
    old.parent.mkdir(parents=True)
    old.write_text("stale = True\n")
    assert not valid_cache(old.parent, VLLM_MLX_FILES, "0.6.0")
    make_wheel(fake_index, "vllm_mlx", "0.6.0", {"vllm_mlx/paged_cache.py": b"fresh = True\n"})
    where = cached_files(VLLM_MLX_FILES, "0.6.0")
    assert where == old.parent and not old.exists()
    assert (where / "vllm_mlx" / "paged_cache.py").read_bytes() == b"fresh = True\n"


def test_a_vllm_cache_keeps_the_modules_its_pool_imports_and_an_older_one_is_completed(
    fake_index: Path, _private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's files import a helper that loads on a CPU and one that imports torch: the
    cache keeps the first beside them (listed as followed), never the second. A folder
    written before files were followed is still read offline, and completed once the
    wheel can be had."""
    from kvpool.conformance.targets.releases import download

    files = VLLM_DISTRIBUTION.files()
    members = {name: b"X = 1\n" for name in files.needed}
    members["vllm/v1/core/block_pool.py"] = (
        b"from vllm.utils.gc_utils import gc_untrack\nfrom vllm.utils.kernels import k\n"
    )
    members["vllm/utils/gc_utils.py"] = b"def gc_untrack(x):\n    return x\n"
    members["vllm/utils/kernels.py"] = b"import torch\nk = 1\n"
    make_wheel(fake_index, "vllm", "0.33.0", members, tags="cp38-abi3-manylinux1_x86_64")
    where = cached_files(files, "0.33.0")
    manifest = json.loads((where / MANIFEST).read_text())
    assert manifest["followed"] == ["vllm/utils/gc_utils.py"]
    assert (where / "vllm/utils/gc_utils.py").is_file()
    assert not (where / "vllm/utils/kernels.py").exists()
    # as an older suite wrote it: no followed list, no helper
    (where / "vllm/utils/gc_utils.py").unlink()
    del manifest["followed"]
    manifest["files"].pop("vllm/utils/gc_utils.py")
    (where / MANIFEST).write_text(json.dumps(manifest))
    assert valid_cache(where, files, "0.33.0")

    def offline(*args: object) -> Path:
        raise download.DownloadFailed("offline")

    release_files.LAST_WHEEL.drop()  # the wheel this process fetched: gone
    with monkeypatch.context() as patched:
        patched.setattr(download, "download_wheel", offline)
        assert cached_files(files, "0.33.0") == where  # read as it is
        assert not (where / "vllm/utils/gc_utils.py").exists()
    assert cached_files(files, "0.33.0") == where  # online: completed
    assert (where / "vllm/utils/gc_utils.py").is_file()
    assert json.loads((where / MANIFEST).read_text())["followed"] == ["vllm/utils/gc_utils.py"]
