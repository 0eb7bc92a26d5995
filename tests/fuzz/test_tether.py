"""A campaign's workers die with their supervisor, even one killed outright, and a FIFO or
a device in the example database is skipped and counted, never waited on."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from fuzz_helpers import fuzz_command
from hypothesis.database import DirectoryBasedExampleDatabase
from kvpool.conformance.tools.fuzz.database import RegularFilesDatabase
from kvpool.conformance.tools.fuzz.sharing import DatabaseErrors

KEY = b"kvpool-fuzz/v2/impl/seed/pool/safety/blocks=8"


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_kill_9_of_the_supervisor_ends_its_workers(tmp_path: Path) -> None:
    campaign = subprocess.Popen(
        fuzz_command("--target", "impl", "--workers", "2", "--seconds", "600"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    workers: list[int] = []
    try:
        assert campaign.stdout is not None
        line = ""
        while "started" not in line:
            line = campaign.stdout.readline()
            assert line, "the campaign ended before its workers started"
        time.sleep(2)  # the workers are past their start (and their tether)
        workers = [p for p in _children(campaign.pid) if _spawned(p)]
        assert len(workers) >= 2, workers
        campaign.kill()
        campaign.wait(timeout=10)
        until = time.monotonic() + 10
        while time.monotonic() < until and any(_alive(p) for p in workers):
            time.sleep(0.1)
        assert [p for p in workers if _alive(p)] == [], "workers outlived their supervisor"
    finally:
        if campaign.poll() is None:
            campaign.kill()
        for pid in workers:  # a failed run leaves none behind either
            if _alive(pid):
                os.kill(pid, 9)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _spawned(pid: int) -> bool:
    """A worker started by multiprocessing's spawn (not its resource tracker)."""
    words = _cmdline(pid)
    return "spawn_main" in words


def _fetch_in_time(database: RegularFilesDatabase) -> list[bytes] | None:
    """What ``fetch`` gives, or ``None`` if it did not return within 10 s (a hang)."""
    got: list[list[bytes]] = []
    reader = threading.Thread(target=lambda: got.append(list(database.fetch(KEY))), daemon=True)
    reader.start()
    reader.join(timeout=10)
    return got[0] if got else None


def test_a_fifo_in_the_database_is_skipped_and_counted(tmp_path: Path) -> None:
    DirectoryBasedExampleDatabase(str(tmp_path)).save(KEY, b"stored")
    errors = DatabaseErrors()
    database = RegularFilesDatabase(str(tmp_path), errors)
    folder = database._key_path(KEY)
    os.mkfifo(folder / "fifo")
    os.symlink("/dev/zero", folder / "zeros")
    assert _fetch_in_time(database) == [b"stored"]
    assert errors.count == 2
    assert "FIFO" in (errors.last or "") or "device" in (errors.last or "")


def test_the_plain_directory_database_would_hang_on_that_fifo(tmp_path: Path) -> None:
    """The planted fault: Hypothesis's own reader on the same folder does not return."""

    class Plain(RegularFilesDatabase):
        fetch = DirectoryBasedExampleDatabase.fetch

    database = Plain(str(tmp_path), DatabaseErrors())
    folder = database._key_path(KEY)
    folder.mkdir(parents=True)
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    try:
        assert _fetch_in_time(database) is None
    finally:  # let the stuck reader go: open the FIFO's other end, then close it
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
