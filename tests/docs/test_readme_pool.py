"""The README's own-pool section passes as written: its ``mypool.py`` block, saved as that
file, and the ``kvpool conform`` command beside it exit 0; without the null block the
same pool fails (the section's point), and the robustness level it says the pool does not
pass does report it."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from kvpool.conformance.tools.reference.examples import Fence, find_fences

README = Path(__file__).resolve().parents[2] / "README.md"
KVPOOL = Path(sys.executable).with_name("kvpool")


def readme_pool() -> tuple[Fence, list[str]]:
    """The README's ``mypool.py`` block and the command of the shell block after it."""
    fences = find_fences(README.read_text(encoding="utf-8"), "README.md")
    (index,) = [i for i, f in enumerate(fences) if f.title == "mypool.py"]
    command = fences[index + 1].body.split("#", 1)[0].strip()
    assert command.startswith("kvpool conform --target mypool:make_pool"), command
    return fences[index], shlex.split(command)[1:]


def conform(folder: Path, source: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    (folder / "mypool.py").write_text(source, encoding="utf-8")
    return subprocess.run(
        [str(KVPOOL), *args], cwd=folder, capture_output=True, text=True, timeout=600
    )


def test_the_readme_pool_passes_as_written(tmp_path: Path) -> None:
    fence, args = readme_pool()
    done = conform(tmp_path, fence.body, args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for run in ("pool/safety", "pool/order", "requests/pool"):
        assert any(
            line.startswith(f"│ {run} ") and "│ pass " in line for line in done.stdout.splitlines()
        ), f"{run} did not pass:\n{done.stdout[-3000:]}"


def test_the_readme_pool_without_its_null_block_fails(tmp_path: Path) -> None:
    fence, args = readme_pool()
    planted = fence.body.replace("self.free = self.blocks[1:]", "self.free = self.blocks[:]")
    assert planted != fence.body
    done = conform(tmp_path, planted, [*args, "--max-examples", "5", "--seed", "1"])
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "free count" in done.stdout


def test_the_readme_pool_does_not_pass_robustness_as_the_readme_says(tmp_path: Path) -> None:
    fence, _ = readme_pool()
    args = ["conform", "--target", "mypool:make_pool", "--machine", "pool", "--level"]
    args += ["robustness", "--max-examples", "20", "--seed", "1", "--max-findings", "1"]
    done = conform(tmp_path, fence.body, args)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "although it breaks the contract" in done.stdout
