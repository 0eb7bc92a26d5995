"""kvpool route-check --target dynamo-mocker: Dynamo's mocker started on loopback (in the
namespace), sent each prompt the workload admits, Dynamo's indexer reading its stream.

The default run holds three short runs (a few prompts each, about 10-20 s of wall-clock
time apiece, most of it the mocker starting): a clean scenario the indexer knows exactly;
the same with only the first prompt sent to the mocker (a planted fault: the spec's replay
holds blocks no store announced, and the check reports them lost); and a mocker killed by
its pid mid-run, reported as exit 2 with its log's last lines, not a hang or a traceback.
``KVPOOL_LONG=1`` adds every scenario the mocker runs. Everything runs in a network
namespace holding only loopback (the mocker and the indexer bind every interface) and is
stopped by its pid."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.routes.isolation import namespace_problem
from kvpool.conformance.tools.validate import dynamo_mocker

if not dynamo_mocker.installed() or importlib.util.find_spec("dynamo.indexer") is None:
    pytest.skip(
        f"Dynamo's mocker and indexer are not installed: {dynamo_mocker.INSTALL}",
        allow_module_level=True,
    )
_PROBLEM = namespace_problem("route-check runs the mocker")
if _PROBLEM is not None:
    pytest.skip(_PROBLEM, allow_module_level=True)

LONG = os.environ.get("KVPOOL_LONG", "") not in ("", "0")
MOCKER = ["route-check", "--target", "dynamo-mocker"]

#: Run inside the namespace: ``kvpool`` with the mocker altered as the first argument says.
ALTERED = """
import os, signal, sys
from kvpool.conformance.cli import main
from kvpool.conformance.tools.routes import mocker_stream
from kvpool.conformance.tools.validate import dynamo_mocker

how = sys.argv.pop(1)
send, apply = dynamo_mocker.Mocker.send, mocker_stream.MockerEngine.apply

def skipping(self, request_id, prompt, max_tokens):
    # the planted fault: only the first prompt reaches the mocker
    if request_id != "s0t0":
        return dynamo_mocker.Answer((0,), None)
    return send(self, request_id, prompt, max_tokens)

def killing(self, action):
    # the mocker dies after two requests, as a panicking one would
    if self.sent == 2 and self.mocker.process.poll() is None:
        os.kill(self.mocker.process.pid, signal.SIGKILL)
    return apply(self, action)

if how == "skip":
    dynamo_mocker.Mocker.send = skipping
else:
    mocker_stream.MockerEngine.apply = killing
main(sys.argv[1:])
"""


def _in_namespace(how: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``kvpool ARGV`` with the mocker altered (``skip`` or ``kill``), in a namespace."""
    script = 'ip link set lo up && exec "$@"'
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return subprocess.run(
        ["unshare", "--net", *user, "sh", "-c", script, "sh",
         sys.executable, "-c", ALTERED, how, *argv],
        env={**os.environ, "KVPOOL_LOOPBACK_NAMESPACE": "1"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _recorded(path: Path) -> dict[str, dict[str, Any]]:
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["target"] == "dynamo-mocker"
    return {s["name"]: s for s in document["scenarios"]}


def test_the_indexer_knows_the_mocker_s_stream_exactly(tmp_path: Path) -> None:
    record = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-c", "from kvpool.conformance.cli import main; main()", *MOCKER,
         "--scenario", "clean", "--requests", "4", "--record", str(record)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dynamo-mocker through its own publisher" in done.stdout
    clean = _recorded(record)["clean"]
    indexer = clean["consumers"]["dynamo-indexer"]
    assert indexer["checks"] > 0 and indexer["held"] > 0
    assert indexer["held"] == indexer["found"] == indexer["claimed"]
    stored = clean["published"]["BlockStored"]
    assert stored > 0 and clean["indexer"]["stored/ok"] == stored


def test_a_prompt_the_mocker_never_ran_is_reported_lost(tmp_path: Path) -> None:
    """The planted fault: the spec's replay runs prompts the mocker is never sent; the
    blocks they hold were never announced, and the indexer's recall falls below 100%."""
    record = tmp_path / "run.json"
    done = _in_namespace("skip", *MOCKER, "--scenario", "clean", "--requests", "4",
                         "--record", str(record))  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    indexer = _recorded(record)["clean"]["consumers"]["dynamo-indexer"]
    assert 0 < indexer["found"] < indexer["held"], indexer
    assert indexer["found"] == indexer["claimed"]  # it claims nothing the replay lacks


def test_a_mocker_killed_mid_run_is_exit_2_with_its_log() -> None:
    done = _in_namespace("kill", *MOCKER, "--scenario", "clean", "--requests", "6")
    assert done.returncode == 2, done.stdout + done.stderr
    err = " ".join(done.stderr.split())
    assert "error: scenario clean: the mocker exited (status -9)" in err
    log = re.search(r"the mocker's log \((\S+)\), last lines:", err)
    assert log is not None, err
    # kept where the error names it, and what the error shows is its end (how much it
    # holds depends on how far the mocker got before the kill: maybe no line yet)
    kept = Path(log[1]).read_text(encoding="utf-8", errors="replace").splitlines()
    shown = done.stderr.split("last lines:\n", 1)[1].splitlines()
    assert [line for line in shown if line.strip()][: len(kept[-15:])] == [
        line for line in kept[-15:] if line.strip()
    ], (kept[-15:], shown)
    shutil.rmtree(Path(log[1]).parent)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--scenario", "resets"], "resets: the mocker's request endpoint cannot reset"),
        (["--scenario", "data-parallel"], "data-parallel: the route-check mocker runs one rank"),
        (["--consumer", "count"], "on the mocker's stream only dynamo-indexer is asked"),
        (["--publisher", "vllm==0.33.0"], "is published by the mocker itself"),
    ],
)
def test_what_the_mocker_cannot_run_is_a_usage_error(argv: list[str], said: str) -> None:
    result = CliRunner().invoke(main, [*MOCKER, *argv, "--requests", "4"])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())


@pytest.mark.skipif(not LONG, reason="every scenario on the mocker (minutes): KVPOOL_LONG=1")
def test_every_scenario_the_mocker_runs(tmp_path: Path) -> None:
    record = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-c", "from kvpool.conformance.cli import main; main()", *MOCKER,
         "--requests", "12", "--record", str(record)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # the late join and restart lose
    runs = _recorded(record)
    assert list(runs) == ["clean", "twins", "late-join", "restart"]
    figures = {name: s["consumers"]["dynamo-indexer"] for name, s in runs.items()}
    # the mocker publishes one store per hash: the twins' second copies cost nothing
    for name in ("clean", "twins"):
        assert figures[name]["held"] == figures[name]["found"] == figures[name]["claimed"]
    # joined late, the indexer never hears of the first half's blocks
    assert figures["late-join"]["found"] < figures["late-join"]["held"]
    # after the restart it still claims the old mocker's blocks
    assert figures["restart"]["found"] < figures["restart"]["claimed"]
