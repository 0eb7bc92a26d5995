"""The checked-in JSON Schema is what the actions generate today, and it describes every
message both sides of a real conversation wrote (and refuses a message that is not one)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.wire import child, session
from kvpool.conformance.wire.schema import schema_text

SCHEMA_FILE = Path(child.__file__).with_name("schema.json")


def test_the_checked_in_schema_is_current() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "regenerate it: python -m kvpool.conformance.wire.schema > conformance/wire/schema.json"
    )


def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture
def conversation(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every message sent and every reply read by the wire's child processes."""
    seen: list[Any] = []
    send, receive = child.Child.send, child.Child.receive

    def sending(self: child.Child, message: dict[str, Any], what: str, *rest: Any) -> None:
        seen.append(message)
        send(self, message, what, *rest)

    def receiving(self: child.Child, what: str) -> bytes:
        line = receive(self, what)
        seen.append(json.loads(line))
        return line

    monkeypatch.setattr(child.Child, "send", sending)
    monkeypatch.setattr(child.Child, "receive", receiving)
    return seen


@pytest.mark.parametrize("protocol", [1, 2])
@pytest.mark.parametrize("program", ["c", "served impl"])
def test_every_message_of_a_run_fits_the_schema(
    program: str,
    protocol: int,
    conversation: list[Any],
    build_c_pool: Callable[[str | None], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session, "PROTOCOL", protocol)  # the version the suite asks for
    command = (
        str(build_c_pool(None))
        if program == "c"
        else f"{sys.executable} -m kvpool.conformance.wire.serve impl"
    )
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--no-coverage",
            "--target",
            f"exec,timeout=60:{command}",
            "--machine",
            "pool",
            "--seed",
            "1",
            "--max-examples",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    kinds = {m["type"] for m in conversation}
    batches = {"batch", "applied_batch"} if protocol == 2 else set()  # the events level's
    assert kinds == {"init", "init_ok", "apply", "applied"} | batches
    assert {m["protocol"] for m in conversation if m["type"] == "init_ok"} == {protocol}
    assert any(m.get("outcome", {}).get("tag") == "Refused" for m in conversation)
    check = validator()
    for message in conversation:
        errors = list(check.iter_errors(message))
        assert not errors, f"{message}: {errors[0].message}"


def test_every_message_of_a_manager_run_fits_the_schema(conversation: list[Any]) -> None:
    served = f"exec,timeout=60:{sys.executable} -m kvpool.conformance.wire.serve impl"
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--no-coverage",
            "--target",
            "impl",
            "--manager",
            served,
            "--machine",
            "requests",
            "--seed",
            "1",
            "--max-examples",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert {m["type"] for m in conversation} == {"init", "init_ok", "call", "returned"}
    methods = {m["method"] for m in conversation if m["type"] == "call"}
    assert {"admit", "commit", "finish", "take_events"} <= methods
    check = validator()
    for message in conversation:
        errors = list(check.iter_errors(message))
        assert not errors, f"{message}: {errors[0].message}"


@pytest.mark.parametrize(
    "message",
    [
        {"type": "apply", "id": 1, "action": {"operation": "get_new_blocks", "num_blocks": "2"}},
        {"type": "apply", "id": 1, "action": {"operation": "touch", "blocks": [1], "extra": 1}},
        {"type": "apply", "id": 1, "action": {"operation": "no_such_operation"}},
        {
            "type": "applied",
            "in_reply_to": 1,
            "outcome": {"tag": "Returned", "value": {}},
            "view": {"free_count": 1},
        },
        {
            "type": "applied",
            "in_reply_to": 1,
            "view": {"free_count": 1},
            "outcome": {"tag": "Refused", "value": "no"},
            "extra": 1,
        },
        {
            "type": "init_ok",
            "in_reply_to": 1,
            "protocol": 1,
            "name": "p",
            "profile": "seed",
            "operations": [],
            "observes": ["colour"],
            "view": {"free_count": 1},
        },
        {"type": "call", "id": 1, "method": "admit", "arguments": {"request_id": "r"}},
        {"type": "call", "id": 1, "method": "view", "arguments": {}},
    ],
)
def test_the_schema_refuses_what_is_not_a_message(message: dict[str, Any]) -> None:
    assert list(validator().iter_errors(message))
