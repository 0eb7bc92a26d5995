"""A program that breaks the protocol is a usage error (exit 2) naming the message it got
wrong, in bounded time: never a traceback, a hang or a finding."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.usage import EXIT_USAGE

#: A program answering the handshake as a pool of its own would, then ``APPLY`` to every
#: ``apply`` (``{id}`` stands for the message's id).
PROGRAM = """
import json, sys, time
for line in sys.stdin:
    message = json.loads(line)
    if message["type"] == "init":
        INIT
    else:
        APPLY
    sys.stdout.flush()
"""
HELLO = (
    'print(json.dumps({"type": "init_ok", "in_reply_to": message["id"], "protocol": 1, '
    '"name": "liar", "profile": "seed", "operations": ["get_new_blocks", "free_blocks", '
    '"get_num_free_blocks"], "observes": [], "view": '
    '{"free_count": message["config"]["num_gpu_blocks"] - 1}}))'
)
#: Well-formed, but the free count of a pool that handed out nothing.
APPLIED = (
    'print(json.dumps({"type": "applied", "in_reply_to": message["id"], "outcome": '
    '{"tag": "Returned", "value": {"result": {"tag": "Nothing", "value": {"#tup": []}}, '
    '"fired": []}}, "view": {"free_count": 0}}))'
)


#: How an error names an ``apply`` message: its id and its action's operation.
APPLY = r"message \d+ \(apply \w+\)"


def program(tmp_path: Path, init: str = HELLO, apply: str = APPLIED) -> str:
    path = tmp_path / "pool.py"
    path.write_text(PROGRAM.replace("INIT", init).replace("APPLY", apply))
    return f"exec,timeout=1:{sys.executable} {path}"


def conform(target: str) -> tuple[Result, float]:
    started = time.monotonic()
    result = CliRunner().invoke(
        main,
        ["conform", "--no-coverage", "--target", target, "--seed", "1", "--max-examples", "5"],
    )
    return result, time.monotonic() - started


def usage_error(result: Result, *said: str) -> None:
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    assert "Nonconformance" not in result.output
    for pattern in said:
        assert re.search(pattern, result.output), result.output


def test_a_malformed_reply_names_the_message(tmp_path: Path) -> None:
    result, _ = conform(program(tmp_path, apply='print("{not json")'))
    usage_error(result, APPLY, "is not JSON", "'{not json'")


def test_a_reply_of_the_wrong_shape_names_the_field(tmp_path: Path) -> None:
    bad = APPLIED.replace('"fired": []', '"fired": 7')
    result, _ = conform(program(tmp_path, apply=bad))
    usage_error(result, APPLY + " is malformed: outcome.value.fired: expected a list")


def test_a_reply_to_another_message_is_refused(tmp_path: Path) -> None:
    wrong = APPLIED.replace('message["id"]', 'message["id"] + 40')
    result, _ = conform(program(tmp_path, apply=wrong))
    usage_error(result, r"a reply to message \d+ came when message \d+ \(apply \w+\) was waiting")


def test_a_program_that_never_answers_times_out(tmp_path: Path) -> None:
    result, seconds = conform(program(tmp_path, apply="time.sleep(600)"))
    usage_error(result, "no reply to " + APPLY + " within 1 s")
    assert seconds < 30


def test_a_program_that_never_answers_the_handshake_times_out(tmp_path: Path) -> None:
    result, seconds = conform(program(tmp_path, init="time.sleep(600)"))
    usage_error(result, r"no reply to message 1 \(init\) within 1 s")
    assert seconds < 30


def test_a_program_that_exits_says_so_with_its_status_and_stderr(tmp_path: Path) -> None:
    crash = 'sys.stderr.write("pool: out of memory\\n"); sys.exit(3)'
    result, _ = conform(program(tmp_path, apply=crash))
    usage_error(
        result,
        "closed its output before replying to " + APPLY,
        "exited with status 3",
        "pool: out of memory",
    )


def test_a_program_that_cannot_start_is_a_usage_error(tmp_path: Path) -> None:
    result, _ = conform(f"exec:{tmp_path / 'no-such-program'}")
    usage_error(result, "cannot start")


def test_a_program_answering_error_is_quoted(tmp_path: Path) -> None:
    answer = (
        'print(json.dumps({"type": "error", "in_reply_to": message["id"], '
        '"text": "no such operation"}))'
    )
    result, _ = conform(program(tmp_path, apply=answer))
    usage_error(result, "answered " + APPLY + " with an error: 'no such operation'")


def test_a_wrong_protocol_version_is_refused(tmp_path: Path) -> None:
    result, _ = conform(program(tmp_path, init=HELLO.replace('"protocol": 1', '"protocol": 9')))
    usage_error(
        result, r"message 1 \(init\) is malformed: protocol 9: this suite speaks protocols 1, 2"
    )


@pytest.mark.parametrize("text", ["exec:", "exec,timeout=0:prog", "exec,speed=9:prog", 'exec:"a'])
def test_malformed_exec_forms_are_usage_errors(text: str) -> None:
    result, _ = conform(text)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Traceback" not in result.output


def test_an_operation_the_suite_does_not_know_is_named(tmp_path: Path) -> None:
    misspelt = HELLO.replace('"free_blocks",', '"free_block",')
    result, _ = conform(program(tmp_path, init=misspelt))
    usage_error(result, r"message 1 \(init\) is malformed: operations: unknown \['free_block'\]")
