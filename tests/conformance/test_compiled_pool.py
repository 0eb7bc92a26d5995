"""The optional compiled build (mypyc) of our pool is judged by the same suite as the
interpreted one: the default pool checks pass on it, and a fault planted in its source is
caught on it (so the run really judges the compiled code). Skipped, with the reason, where
mypyc or a C compiler is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kvpool.conformance.tools.bench import compiled
from kvpool.conformance.usage import EXIT_FINDING, EXIT_PASS

TARGET = f"{compiled.PACKAGE}.block_pool:BlockPool"


def _built(where: Path | None = None, plant: tuple[str, str, str] | None = None) -> Path:
    try:
        return compiled.build(where, plant=plant)
    except compiled.CompiledBuildUnavailable as exc:
        pytest.skip(f"no compiled build here: {exc}")


def _conform(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(where))
    cli = [sys.executable, "-c", "from kvpool.conformance.cli import main; main()"]
    return subprocess.run(
        [*cli, "conform", "--target", TARGET, "--no-coverage", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )


def test_the_compiled_build_loads_compiled_modules_only() -> None:
    where = _built()
    module = compiled.load(where)
    assert module.__file__ is not None and module.__file__.endswith(".so")
    for name in compiled.COMPILED:
        assert not (where / compiled.PACKAGE / f"{name}.py").exists()
    pool = module.BlockPool(8, True, hash_block_size=4)
    blocks = pool.get_new_blocks(3)
    assert [b.block_id for b in blocks] == [1, 2, 3]
    assert type(blocks[0]).__module__ == f"{compiled.PACKAGE}.block"


def test_the_compiled_pool_passes_the_pool_checks() -> None:
    done = _conform(_built(), "--machine", "pool", "--seed", "1")
    assert done.returncode == EXIT_PASS, done.stdout[-3000:] + done.stderr[-3000:]
    assert "every run passed" in done.stdout


def test_a_fault_planted_in_the_compiled_source_is_caught(tmp_path: Path) -> None:
    # Blocks freed without a key go to the back instead of the front: the order level's
    # free-queue order breaks, and only on the compiled copy that carries the plant.
    plant = (
        "block_pool",
        "self.free_block_queue.prepend_n(to_front)",
        "self.free_block_queue.append_n(to_front)",
    )
    where = _built(tmp_path / "planted", plant=plant)
    done = _conform(where, "--machine", "pool", "--level", "order", "--fail-fast", "--seed", "1")
    assert done.returncode == EXIT_FINDING, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Nonconformance: pool/order" in done.stdout
    assert "free queue order" in done.stdout
