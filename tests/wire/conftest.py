"""What the wire tests share: the C pool built from source, faults and all, and no program
left running after a test."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kvpool.conformance.wire import child
from kvpool.conformance.wire.session import close_sessions

#: The C pool's source, in the repository.
C_POOL = Path(__file__).resolve().parents[2] / "pools" / "c" / "kvpool_c.c"
#: The faults planted in it, each a compile-time flag.
FAULTS = ("FAULT_DOUBLE_HANDOUT", "FAULT_UNKEYED_TO_BACK", "FAULT_ACCEPT_OVERFREE")


@pytest.fixture(autouse=True)
def _programs_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)  # a failure writes its trace here
    yield
    close_sessions()


@pytest.fixture(scope="session")
def build_c_pool(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str | None], Path]:
    """Compile the C pool (with one planted fault, or none) with the system's ``cc``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        if os.environ.get("KVPOOL_REQUIRE_ENGINES", "") not in ("", "0"):
            pytest.fail("no C compiler (cc or gcc) on PATH: CI builds the C pool from source")
        pytest.skip("no C compiler (cc or gcc) on PATH: the C pool is built from source")
    built: dict[str | None, Path] = {}
    directory = tmp_path_factory.mktemp("c-pool")

    def build(fault: str | None = None) -> Path:
        if fault not in built:
            program = directory / f"kvpool_c{'_' + fault if fault else ''}"
            flags = [f"-D{fault}"] if fault else []
            subprocess.run(
                [
                    compiler,
                    "-std=c99",
                    "-O2",
                    "-Wall",
                    "-Werror",
                    *flags,
                    "-o",
                    str(program),
                    str(C_POOL),
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
            built[fault] = program
        return built[fault]

    return build


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The type of every message the suite sends a program, in order."""
    kinds: list[str] = []
    send = child.Child.send

    def sending(self: child.Child, message: dict[str, Any], what: str, *rest: Any) -> None:
        kinds.append(message["type"])
        send(self, message, what, *rest)

    monkeypatch.setattr(child.Child, "send", sending)
    return kinds
