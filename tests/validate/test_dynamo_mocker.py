"""``kvpool validate`` on Dynamo's mocker (vLLM backend), run by its driver. It agrees with
the spec's manager after every request (stores, removals, prefixes, hits) until a prompt
cached whole computes its last block again, a second copy of a hash: vLLM publishes that
copy's store, the mocker does not (it publishes the first store of a hash only, and one
removal, as the hash's last copy goes).

The default tests run the mocker four times (five requests, twenty, twenty-two, then the
committed finding's two: about 35 s of wall-clock time, most of it waiting); ``KVPOOL_LONG=1`` adds
seeds 1-3 of 24 requests, each shrunk by re-running the mocker, a process per attempt
(minutes). The mocker runs in a network namespace of its own holding only loopback (it
binds every interface) and is stopped by its pid."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.tools.routes.isolation import INSIDE, namespace_problem
from kvpool.conformance.tools.validate import dynamo_mocker
from kvpool.conformance.tools.validate.engine_side import windows
from kvpool.conformance.tools.validate.request_log import read_log
from kvpool.conformance.tools.validate.spec_side import SpecReplay
from kvpool.spec import get_profile
from kvpool.spec.events import BlockRemoved

if not dynamo_mocker.installed():
    pytest.skip(
        f"Dynamo's mocker is not installed: {dynamo_mocker.INSTALL}", allow_module_level=True
    )
_PROBLEM = namespace_problem(dynamo_mocker.WHO)
if _PROBLEM is not None:
    pytest.skip(_PROBLEM, allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
LONG = os.environ.get("KVPOOL_LONG", "") not in ("", "0")
DRIVER = f"{sys.executable} -m kvpool.conformance.tools.validate.dynamo_mocker"


def mocker_run(folder: Path, seed: int, requests: int) -> list[str]:
    log, recording = folder / "log.jsonl", folder / "recording.jsonl"
    args = ["--seed", str(seed), "--requests", str(requests), str(log), str(recording)]
    assert dynamo_mocker.main(args) == 0, recording.parent / "recording.jsonl.mocker.log"
    return [str(log), str(recording)]


def validate(*args: str) -> Result:
    return CliRunner().invoke(main, ["validate", *args, "--profile", "vllm-0.33"])


def test_the_mocker_agrees_until_a_second_copy_and_then_leaves_its_store_out(
    tmp_path: Path,
) -> None:
    log, recording = mocker_run(tmp_path, 1, 5)
    ran = read_log(Path(log))
    assert [r.request_id for r in ran.requests] == ["r1", "r2", "r3", "r4", "r5"]
    # r5 is r1's first block alone: a prompt cached whole hits nothing (a token must be
    # computed), so its block is computed again, a second copy of a hash still cached
    assert ran.requests[4].prompt == ran.requests[0].prompt[: dynamo_mocker.BLOCK_SIZE]
    assert ran.requests[4].cached_tokens == 0
    result = validate(log, recording, "--trace", str(tmp_path / "trace.jsonl"))
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "5 requests judged after every request" in text
    assert (
        "difference: per-copy: after request 5 ('r5'): 1-block prefix of 4 tokens "
        "ending [..., 131, 61, 254, 390]: 2 stores in the spec's stream, 1 in the engine's"
    ) in text


def _request_log(folder: Path, prompts: list[list[int]]) -> Path:
    """A request log asking for ``prompts`` (ids r1, r2, ...)."""
    path = folder / "requests.jsonl"
    header = {"format": "kvpool-request-log", "version": 1, "block_size": 4, "num_gpu_blocks": 48}
    lines = [json.dumps(header)]
    lines += [json.dumps({"request_id": f"r{i}", "prompt": p}) for i, p in enumerate(prompts, 1)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_with_no_second_copy_the_mocker_is_the_spec_through_evictions(tmp_path: Path) -> None:
    """Twenty 13-token prompts, some sharing a 2-block prefix, none cached whole: 3 blocks
    each overflow the 47 usable blocks, so blocks are evicted; the mocker's stores,
    removals (in vLLM's eviction order), prefixes and hits are the spec's throughout."""
    rng = random.Random(7)
    prompts: list[list[int]] = []
    for _ in range(20):
        if prompts and rng.random() < 0.3:
            prompts.append(rng.choice(prompts)[:8] + [rng.randrange(1, 500) for _ in range(5)])
        else:
            prompts.append([rng.randrange(1, 500) for _ in range(13)])
    asked = _request_log(tmp_path, prompts)
    log, recording = tmp_path / "log.jsonl", tmp_path / "recording.jsonl"
    assert dynamo_mocker.main([str(asked), str(log), str(recording)]) == 0
    result = validate(str(log), str(recording), "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["requests"] == 20 and record["per_request"] is True
    assert record["engine_removals"] == record["spec_removals"] > 0
    assert record["engine_stores"] == record["spec_stores"]


def test_the_mocker_removes_a_hash_once_when_its_last_copy_goes(tmp_path: Path) -> None:
    """A one-block prompt twice (two copies of its hash), then twenty prompts that evict
    both: the spec's stream (vLLM's) removes the hash once per copy, the mocker's once, as
    the last copy goes. ``kvpool validate`` stops at the missing store before this."""
    rng = random.Random(11)
    twice = [7, 8, 9, 10]
    prompts = [twice, twice] + [[rng.randrange(11, 500) for _ in range(13)] for _ in range(20)]
    log_path = tmp_path / "log.jsonl"
    recording = tmp_path / "recording.jsonl"
    asked = _request_log(tmp_path, prompts)
    assert dynamo_mocker.main([str(asked), str(log_path), str(recording)]) == 0
    log = read_log(log_path)
    spec = SpecReplay(log, get_profile("vllm-0.33"))
    spec_removed = []
    for number, request in enumerate(log.requests, 1):
        for event in spec.run(request).events:
            if isinstance(event, BlockRemoved) and spec.tokens[event.block_hash] == tuple(twice):
                spec_removed.append(number)
    mocker_removed, hashes = [], set()
    for number, window in enumerate(windows(recording, log)[0], 1):
        for wire in window.events:
            if wire.kind == "BlockStored" and list(wire.token_ids[:4]) == twice:
                hashes.add(wire.block_hashes[0])
            elif wire.kind == "BlockRemoved":
                mocker_removed += [number for h in wire.block_hashes if h in hashes]
    assert len(spec_removed) == 2
    assert mocker_removed == [spec_removed[-1]]


def test_the_committed_finding_still_shows_on_the_mocker(tmp_path: Path) -> None:
    """findings/dynamo-mocker-1.6.1/validate-seed-1.jsonl run again: the same difference."""
    trace = ROOT / "findings" / "dynamo-mocker-1.6.1" / "validate-seed-1.jsonl"
    said = json.loads(trace.read_text(encoding="utf-8").splitlines()[0])["difference"]
    log, recording = tmp_path / "log.jsonl", tmp_path / "recording.jsonl"
    assert dynamo_mocker.main([str(trace), str(log), str(recording)]) == 0
    result = validate(str(log), str(recording), "--trace", str(tmp_path / "t.jsonl"), "--json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.output)["difference"] == said


@pytest.mark.skipif(not LONG, reason="a campaign of minutes: KVPOOL_LONG=1")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_per_copy_difference_shrinks_by_re_running_the_mocker(
    tmp_path: Path, seed: int
) -> None:
    trace = tmp_path / "trace.jsonl"
    args = [*mocker_run(tmp_path, seed, 24), "--trace", str(trace), "--rerun", DRIVER]
    result = validate(*args, "--budget", "300", "--json")
    assert result.exit_code == 1, result.output
    record = json.loads(result.output)
    assert record["difference"].startswith("per-copy: ")
    assert record["rerun"] is True and record["attempts"] >= 2
    assert record["shrunk_difference"].startswith("per-copy: ")
    shrunk = read_log(trace).requests
    assert len(shrunk) == len(record["shrunk"]) <= 2
    assert shrunk[-1].prompt == shrunk[0].prompt[: len(shrunk[-1].prompt)]


def test_a_request_log_the_driver_cannot_send_is_exit_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    salted = tmp_path / "salted.jsonl"
    header = {"format": "kvpool-request-log", "version": 1, "block_size": 4, "num_gpu_blocks": 48}
    request = {"request_id": "r1", "prompt": [1, 2, 3, 4], "salt": "tenant-a"}
    salted.write_text(json.dumps(header) + "\n" + json.dumps(request) + "\n", encoding="utf-8")
    paths = [str(tmp_path / "log.jsonl"), str(tmp_path / "recording.jsonl")]
    assert dynamo_mocker.main([str(salted), *paths]) == 2
    assert "request 'r1' has a cache salt; this driver sends none" in capsys.readouterr().err
    (tmp_path / "not-a-log.jsonl").write_text("{}\n", encoding="utf-8")
    assert dynamo_mocker.main([str(tmp_path / "not-a-log.jsonl"), *paths]) == 2
    assert "line 1: not a request log" in capsys.readouterr().err
    assert not Path(paths[1]).exists()  # nothing was started


CRASHING_MOCKER = """
import sys
from kvpool.conformance.tools.validate import dynamo_mocker
crash = "import sys; print('simulated panic at tier.rs'); sys.exit(101)"
dynamo_mocker._mocker_command = lambda: [sys.executable, "-c", crash]
sys.exit(dynamo_mocker.main(sys.argv[1:]))
"""


def test_a_mocker_that_dies_is_exit_2_with_its_log(tmp_path: Path) -> None:
    """The driver notices its mocker exit (not the 90 s registration wait) and shows its
    log; run as a process of its own (in the namespace's place: the stand-in binds
    nothing), as the driver changes its environment."""
    paths = [str(tmp_path / "log.jsonl"), str(tmp_path / "recording.jsonl")]
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_MOCKER, "--requests", "2", *paths],
        env={**os.environ, INSIDE: "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "the mocker exited (status 101) before it registered dynamo.backend.generate" in (
        done.stderr
    )
    assert "simulated panic at tier.rs" in done.stderr
    assert "Traceback" not in done.stderr
