"""``kvpool fuzz`` end to end: a planted fault is found and its trace written once, our
pool runs clean, the deadline and Ctrl-C stop the campaign with no process left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fuzz_helpers import PLANTED, actions_run, fuzz_command, run_fuzz
from kvpool.conformance.tools.fuzz import supervise
from kvpool.conformance.tools.fuzz.command import campaign_status
from kvpool.conformance.trace.replay import replay_file


def test_a_planted_fault_is_found_shrunk_and_its_trace_written_once(tmp_path: Path) -> None:
    result = run_fuzz(
        "--target", "faulty_pools:TouchForgetsQueue",
        "--machine", "pool", "--level", "safety",
        "--workers", "2", "--seconds", "6", "--seed", "3",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.output.count("FOUND pool/safety") == 1, result.output
    assert "after touch: free count" in result.output
    assert "Shrunk action sequence" in result.output
    traces = sorted((tmp_path / "kvpool-traces").glob("*.itf.json"))
    assert [t.name for t in traces] == [
        t.name for t in traces if t.name.startswith("faulty_pools_TouchForgetsQueue-pool-safety-")
    ]
    assert len(traces) == 1, traces
    assert f"{traces[0].name} --target faulty_pools:TouchForgetsQueue" in result.output
    verdict = replay_file(traces[0], "faulty_pools:TouchForgetsQueue")
    assert not verdict.conforms
    assert "touch" in verdict.describe()
    assert len(verdict.trace.actions) <= 6, "the trace is shrunk"
    assert "1 kind of failure found" in result.output
    assert "deadline reached" in result.output
    assert "inferred from the pool's names" in result.output  # what it infers, said


def test_our_pool_runs_clean_on_every_machine_until_the_action_budget(tmp_path: Path) -> None:
    result = run_fuzz(
        "--target",
        "impl",
        "--workers",
        "2",
        "--examples-per-round",
        "20",
        "--max-actions",
        "15000",
        "--seconds",
        "120",
        "--status-every",
        "1",
    )  # fmt: skip  (at about 5,000 actions/s a budget of 15,000 outlasts the first status line)
    assert result.exit_code == 0, result.output
    assert "no failure found" in result.output
    assert "action budget reached" in result.output
    assert actions_run(result.output) >= 15000
    for job in ("pool/safety", "pool/order", "pool/robustness", "requests/pool"):
        assert job in result.output
    assert " actions (" in result.output  # the status lines of a non-terminal
    assert not list((tmp_path / "kvpool-traces").glob("*"))


def test_usage_errors_exit_2_before_any_worker_starts() -> None:
    result = run_fuzz("--target", "nosuchmodule:pool", "--seconds", "1")
    assert result.exit_code == 2
    assert "cannot import module 'nosuchmodule'" in result.output
    result = run_fuzz("--level", "fast", "--seconds", "1")
    assert result.exit_code == 2
    assert "unknown level(s) fast" in result.output


def _session_processes(session: int) -> list[int]:
    """Processes still in ``session`` (the campaign was started as its leader)."""
    left = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[4]) == session:
            left.append(int(entry))
    return left


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    """A campaign as the leader of its own session; its output up to the workers' start."""
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLANTED), str(here)])}
    campaign = subprocess.Popen(
        fuzz_command(*args, "--status-every", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    assert campaign.stdout is not None
    started = ""
    while "started" not in started:
        line = campaign.stdout.readline()
        assert line, "the campaign ended before its workers started"
        started += line
    return campaign, started


def _until_actions_run(campaign: subprocess.Popen[str], within: float = 120.0) -> str:
    """The campaign's status lines (one a second) up to the first that counts actions run:
    on a loaded machine the workers may take longer than any fixed sleep to start."""
    assert campaign.stdout is not None
    seen = ""
    until = time.monotonic() + within
    while time.monotonic() < until:
        line = campaign.stdout.readline()
        assert line, "the campaign ended before its workers ran an action"
        seen += line
        counted = re.search(r"  ([\d,]+) actions \(", line)
        if counted and int(counted.group(1).replace(",", "")) > 0:
            return seen
    raise AssertionError(f"no action run within {within} s:\n{seen}")


@pytest.mark.parametrize("to", ["terminal", "parent"])
def test_ctrl_c_stops_the_campaign_cleanly(to: str, tmp_path: Path) -> None:
    """SIGINT to the whole process group (a Ctrl-C in a terminal) or to the parent alone:
    the final table, exit 130 (interrupted; nothing found), no traceback, no worker left."""
    campaign, started = _start("--target", "impl", "--workers", "2")
    started += _until_actions_run(campaign)
    if to == "terminal":
        os.killpg(campaign.pid, signal.SIGINT)
    else:
        campaign.send_signal(signal.SIGINT)
    out, err = campaign.communicate(timeout=60)
    output = started + out
    assert campaign.returncode == 130, output + err  # interrupted, per conformance/exits.py
    assert "interrupted (Ctrl-C)" in output
    assert "no failure found before Ctrl-C" in output
    assert actions_run(output) > 0
    assert "Traceback" not in output + err, err
    assert err.strip() == "", err
    assert _session_processes(campaign.pid) == []


def test_a_worker_stuck_in_the_pool_is_ended_by_a_second_ctrl_c() -> None:
    """A pool that never returns holds its worker past SIGINT; a second Ctrl-C ends it."""
    campaign, started = _start(
        "--target", "hanging_pool:HangingPool", "--machine", "pool", "--level", "safety",
        "--workers", "1",
    )  # fmt: skip
    time.sleep(4)  # get_usage is drawn within the first test cases: the worker hangs
    campaign.send_signal(signal.SIGINT)
    time.sleep(1)
    campaign.send_signal(signal.SIGINT)
    start = time.monotonic()
    out, err = campaign.communicate(timeout=60)
    output = started + out
    assert campaign.returncode == 130, output + err  # the user's Ctrl-C ended it
    assert "Ctrl-C again to end them at once" in output
    assert "worker 1 did not stop when asked and was terminated" in output
    assert time.monotonic() - start < 15
    assert _session_processes(campaign.pid) == []


def test_a_worker_killed_at_the_deadline_leaves_the_campaign_undecided(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pool that never returns holds its worker past the deadline and past SIGINT: the
    worker is killed, its round never ended, so the campaign exits 5 (undecided), not 0."""
    monkeypatch.setattr(supervise, "ROUND_GRACE", 0.5)
    monkeypatch.setattr(supervise, "INTERRUPT_GRACE", 1.0)
    result = run_fuzz(
        "--target", "hanging_pool:HangingPool", "--machine", "pool", "--level", "safety",
        "--workers", "1", "--seconds", "8",
    )  # fmt: skip
    assert "worker 1 did not stop when asked and was terminated" in result.output
    assert result.exit_code == 5, result.output
    assert "undecided: a worker hung and was killed" in result.output
    assert "no failure found" not in result.output


def _outcome(
    reason: str, *, found: bool = False, crashed: bool = False, killed: bool = False
) -> supervise.Outcome:
    tally = SimpleNamespace(findings={("job", "sig"): object()} if found else {})
    return supervise.Outcome(
        tally,  # type: ignore[arg-type]  (only its findings are read)
        1.0,
        reason,
        ["worker 1: OSError"] if crashed else [],
        [1] if killed else [],
    )


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (_outcome(supervise.DEADLINE), 0),
        (_outcome(supervise.ENOUGH_ACTIONS), 0),
        (_outcome(supervise.INTERRUPTED), 130),
        (_outcome(supervise.INTERRUPTED, found=True), 1),
        (_outcome(supervise.INTERRUPTED, killed=True), 130),
        (_outcome(supervise.DEADLINE, killed=True), 5),
        (_outcome(supervise.FIRST_FAILURE, found=True, killed=True), 1),
        (_outcome(supervise.CRASHED, crashed=True), 4),
        (_outcome(supervise.DEADLINE, crashed=True, killed=True), 4),
    ],
)
def test_the_campaign_status_follows_the_exit_policy(
    outcome: supervise.Outcome, status: int
) -> None:
    """A finding stands whatever ended the campaign; then kvpool's own failure; then
    Ctrl-C; then a killed worker (undecided); else a pass."""
    assert campaign_status(outcome) == status
