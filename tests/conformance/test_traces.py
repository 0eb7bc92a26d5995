"""Counterexample traces: written on failure, replayed, shown, and refused when hostile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st
from kvpool.conformance.cli import main
from kvpool.conformance.trace import files
from kvpool.conformance.trace.files import TraceFileError, parse_trace, read_trace
from kvpool.conformance.trace.itf import decode, encode
from kvpool.conformance.trace.model import AnyAction, Trace, TraceMeta
from kvpool.conformance.trace.replay import replay_trace
from kvpool.spec import FreeBlocks, GetNewBlocks, PoolConfig

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


def kvpool(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def failing_run(tmp_path: Path, *args: str) -> tuple[Result, Path]:
    result = kvpool(
        "conform", "--no-coverage", "--max-findings", "1", "--trace-dir", str(tmp_path), *args
    )
    assert result.exit_code == 1, result.output
    (trace,) = tmp_path.glob("*.itf.json")
    return result, trace


@pytest.fixture(scope="module")
def pool_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import os

    tmp = tmp_path_factory.mktemp("pool")
    os.environ.setdefault("PYTHONPATH", "")
    sys.path.insert(0, str(HERE))
    result, trace = failing_run(
        tmp,
        "--target",
        "faulty_pools:CachedToFront",
        "--machine",
        "pool",
        "--level",
        "order",
        "--max-examples",
        "200",
        "--seed",
        "11",
    )
    replay = f"kvpool replay {trace} --target faulty_pools:CachedToFront"
    assert str(trace) in result.output and replay in result.output
    return trace


def test_a_failure_writes_an_itf_trace_with_meta_and_one_state_per_step(pool_trace: Path) -> None:
    data = json.loads(pool_trace.read_text())
    assert data["#meta"]["format"] == "ITF"
    kv = data["#meta"]["kvpool"]
    assert kv["target"] == "faulty_pools:CachedToFront" and kv["level"] == "order"
    assert kv["seed"] == {"tag": "Some", "value": 11}
    assert kv["kvpool_version"] and kv["message"].startswith("after free_blocks")
    states = data["states"]
    assert states[0]["action"] == {"operation": "init"}
    assert [s["#meta"]["index"] for s in states] == list(range(len(states)))
    last = states[-1]
    assert {"expected", "actual", "free_queue", "ref_cnt", "keys"} <= set(last)
    assert last["verdict"] == kv["message"]
    assert all(s["verdict"] == "ok" for s in states[1:-1])


def test_the_trace_replays_the_same_failure_every_time(pool_trace: Path) -> None:
    command = ("replay", str(pool_trace), "--target", "faulty_pools:CachedToFront")
    first, second = kvpool(*command), kvpool(*command)
    assert first.exit_code == second.exit_code == 1
    assert first.output == second.output
    assert "<- diverges here" in first.output and "free queue order" in first.output


def test_a_fixed_target_replays_clean(pool_trace: Path) -> None:
    result = kvpool("replay", str(pool_trace), "--target", "impl")
    assert result.exit_code == 0, result.output
    assert "conforms" in result.output


def test_the_emitted_pytest_file_fails_the_same_way(pool_trace: Path) -> None:
    (test_file,) = pool_trace.parent.glob("test_*.py")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        cwd=HERE,
        timeout=120,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "free queue order" in run.stdout


def test_show_renders_every_step_and_marks_the_divergence(pool_trace: Path) -> None:
    trace = read_trace(pool_trace)
    table = kvpool("show", str(pool_trace))
    assert table.exit_code == 0, table.output
    assert f"step {len(trace.steps)} diverges" in table.output
    markdown = kvpool("show", "--format", "markdown", str(pool_trace))
    lines = [ln for ln in markdown.output.splitlines() if ln.startswith("| ")]
    assert len(lines) == 1 + len(trace.steps)
    assert lines[-1].startswith(f"| **{len(trace.steps)}**")


def test_a_request_level_failure_leaves_a_trace_that_replays(tmp_path: Path) -> None:
    _, trace = failing_run(
        tmp_path,
        "--machine",
        "requests",
        "--manager",
        "faulty_managers:make_HeadFirstFree",
        "--max-examples",
        "200",
        "--seed",
        "1",
    )
    loaded = read_trace(trace)
    assert loaded.meta.machine == "requests" and loaded.meta.level == "manager"
    named = kvpool("replay", str(trace))  # the manager is not built in: the user names it
    assert named.exit_code == 2 and "--manager faulty_managers:make_HeadFirstFree" in named.output
    again = kvpool("replay", str(trace), "--manager", "faulty_managers:make_HeadFirstFree")
    assert again.exit_code == 1 and "tail-first-free" in again.output
    assert kvpool("replay", str(trace), "--manager", "impl").exit_code == 0


def test_a_target_with_two_answers_is_reported_nondeterministic() -> None:
    actions = (GetNewBlocks(3), FreeBlocks((1, 2, 3)), GetNewBlocks(1))
    meta = TraceMeta("flaky_pool:CoinFlipFree", "seed", "pool", "order", PoolConfig(5))
    trace = Trace(meta, actions)
    verdicts = {replay_trace(trace, meta.target, runs=8).nondeterministic for _ in range(3)}
    assert True in verdicts


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(range(3)), st.data())
def test_actions_survive_the_itf_round_trip(_: int, data: st.DataObject) -> None:
    from kvpool.conformance.machines.pool.draw import request_hashes
    from kvpool.conformance.search.choices import RandomChoices

    drawn = RandomChoices(str(data.draw(st.integers(0, 2**32))))
    hashes = request_hashes(drawn, 1, data.draw(st.integers(0, 3)))
    blocks = tuple(data.draw(st.lists(st.integers(0, 2**60), max_size=4)))
    for action in (
        FreeBlocks(blocks, data.draw(st.booleans()), blocks[:1]),
        GetNewBlocks(data.draw(st.integers(-(2**70), 2**70))),
    ):
        text = json.dumps(encode(action, AnyAction))
        assert decode(json.loads(text), AnyAction) == action
    assert hashes == tuple(decode(encode(hashes, tuple[bytes, ...]), tuple[bytes, ...]))


def write(tmp_path: Path, content: object) -> Path:
    path = tmp_path / "hostile.itf.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def valid(pool_trace: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(pool_trace.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda d: "{not json", "is not JSON"),
        (lambda d: [1, 2], "is not a kvpool trace"),
        (lambda d: {**d, "states": []}, "is not a kvpool trace"),
        (lambda d: {**d, "extra": 1}, "is not a kvpool trace"),
        (
            lambda d: {
                **d,
                "states": [
                    *d["states"][:1],
                    {"#meta": {"index": 1}, "action": {"operation": "rm_rf"}},
                ],
            },
            "unknown kind 'rm_rf'",
        ),
        (
            lambda d: {
                **d,
                "states": [
                    *d["states"][:1],
                    {
                        "#meta": {"index": 1},
                        "action": {"operation": "get_new_blocks", "num_blocks": "3"},
                    },
                ],
            },
            "expected an integer",
        ),
        (
            lambda d: {
                **d,
                "states": [
                    *d["states"][:1],
                    {
                        "#meta": {"index": 1},
                        "action": {
                            "operation": "admit",
                            "request_id": "r",
                            "tokens": [1],
                            "salt": {"tag": "None", "value": {"#tup": []}},
                        },
                    },
                ],
            },
            "does not belong in a pool trace",
        ),
        (
            lambda d: {
                **d,
                "#meta": {
                    **d["#meta"],
                    "kvpool": {
                        **d["#meta"]["kvpool"],
                        "config": {**d["#meta"]["kvpool"]["config"], "num_gpu_blocks": 10**9},
                    },
                },
            },
            "is not a kvpool trace",
        ),
        (lambda d: "[" * 100000 + "]" * 100000, "nests deeper than 64 levels"),
    ],
)
def test_hostile_trace_files_are_refused_with_exit_2(
    tmp_path: Path, pool_trace: Path, break_it: object, message: str
) -> None:
    path = write(tmp_path, break_it(valid(pool_trace)))  # type: ignore[operator]
    for command in ("replay", "show"):
        result = kvpool(command, str(path))
        assert result.exit_code == 2, result.output
        assert message in result.output, result.output


def test_an_oversized_file_is_refused_before_parsing(
    tmp_path: Path, pool_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_TRACE_BYTES", 100)
    with pytest.raises(TraceFileError, match="at most 100"):
        read_trace(pool_trace)


def test_every_written_trace_validates_against_the_shipped_schema(pool_trace: Path) -> None:
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(files.schema())
    parse_trace(valid(pool_trace))
