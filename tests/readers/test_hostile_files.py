"""The hostile-file campaign: every file reader, through the command that uses it, given
files that are not data (a FIFO, devices, a folder, links to them, a file past its bound)
and data that must not be trusted (numbers past Python's int-string limit, a regular
expression that backtracks, a trace whose profile field is a path). Each run has a
deadline; none may hang, print a traceback, or end with another status than 2 (a usage or
input error)."""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest
from click.testing import CliRunner, Result
from hostile import SEED_TRACES, SEED_VECTORS
from kvpool.conformance.cli import main
from kvpool.conformance.tools.vectors import runner
from kvpool.conformance.trace import files as trace_files

#: Seconds any one command may take on a hostile file (they take well under one).
DEADLINE = 20
#: A number past Python's int-string limit (4,300 digits).
HUGE = "7" * 5000
SECRET = "TOP-SECRET-LINE"


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`TimeoutError` in this thread after ``seconds`` (a blocking ``open``
    or ``read`` is interrupted too)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"no answer within {seconds} s: the reader hangs")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def kvpool(args: list[str]) -> Result:
    with deadline(DEADLINE):
        return CliRunner().invoke(main, args, env={"COLUMNS": "200"})


def refused_cleanly(result: Result | Ran) -> None:
    """Status 2, no hang, no traceback."""
    assert not isinstance(result.exception, TimeoutError), "the command hangs"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}\n{result.output}"
    )
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == 2, result.output


# --- the hostile files: each made at a path a command is given --------------------------


def fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.symlink_to(target)

    return make


def folder(path: Path) -> None:
    path.mkdir()


def over_the_bound(path: Path) -> None:
    """A regular file of 200 MB (sparse): larger than any reader's bound."""
    with path.open("wb") as f:
        f.truncate(200 * 1024 * 1024)


def holding(text: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.write_text(text, encoding="utf-8")

    return make


NOT_DATA: dict[str, Callable[[Path], None]] = {
    "fifo": fifo,
    "/dev/zero": link_to("/dev/zero"),
    "/dev/urandom": link_to("/dev/urandom"),
    "folder": folder,
    "dangling link": link_to("/nonexistent/kvpool-nothing"),
    "over the bound": over_the_bound,
}


def huge_json(path: Path) -> None:
    path.write_text(f'{{"#meta": {HUGE}}}', encoding="utf-8")


def huge_toml(path: Path) -> None:
    path.write_text(f"target = {HUGE}\n", encoding="utf-8")


def huge_recording_line(path: Path) -> None:
    header = '{"format": "kvpool-kv-events", "version": 1, "sources": [], "started": 0}'
    path.write_text(f'{header}\n{{"t": {HUGE}, "via": "live", "frames": []}}\n')


# --- the readers, each through its command -----------------------------------------------
#: name -> (the file name the command reads, how to run the command on that path, the
#: hostile contents for its format)
Command = Callable[[Path], "Result | Ran"]


def in_folder(command: Callable[[Path], Result | Ran]) -> Command:
    """A command given the folder the hostile file sits in (it scans for *.itf.json)."""
    return lambda path: command(path.parent)


@dataclass(frozen=True)
class Ran:
    """What a run of the standalone runner gave, as much of a click Result as is read."""

    exit_code: int
    output: str
    exception: BaseException | None


def run_standalone(directory: Path) -> Ran:
    """The standalone vector runner (no click, no kvpool import): its return code."""
    printed = io.StringIO()
    try:
        with deadline(DEADLINE), redirect_stdout(printed):
            code = runner.main([str(directory), "--pool", "kvpool.impl:BlockPool"])
    except Exception as exc:  # a hang (TimeoutError) or a traceback
        return Ran(1, printed.getvalue(), exc)
    return Ran(code, printed.getvalue(), None)


CONFORM = ["conform", "--target", "impl", "--machine", "pool", "--level", "safety"]
CONFORM += ["--max-examples", "5", "--no-coverage"]

READERS: dict[str, tuple[str, Command, Callable[[Path], None]]] = {
    "show": ("t.itf.json", lambda p: kvpool(["show", str(p)]), huge_json),
    "replay": ("t.itf.json", lambda p: kvpool(["replay", "--target", "impl", str(p)]), huge_json),
    "vectors check": (
        "v.itf.json",
        in_folder(lambda d: kvpool(["vectors", "check", str(d), "--target", "impl"])),
        huge_json,
    ),
    "vector runner": ("v.itf.json", in_folder(run_standalone), huge_json),
    "conform --expect": ("e.toml", lambda p: kvpool([*CONFORM, "--expect", str(p)]), huge_toml),
    "conform --profile": ("p.toml", lambda p: kvpool([*CONFORM, "--profile", str(p)]), huge_toml),
    "profile show": ("p.toml", lambda p: kvpool(["profile", "show", str(p)]), huge_toml),
    "monitor": (
        "s.jsonl",
        lambda p: kvpool(["monitor", "--seconds", "5", str(p)]),
        huge_recording_line,
    ),
    "route-check --table": (
        "r.json",
        lambda p: kvpool(["route-check", "--table", str(p)]),
        huge_json,
    ),
}

CASES = [
    pytest.param(reader, kind, id=f"{reader}-{kind}")
    for reader in READERS
    for kind in [*NOT_DATA, "huge number"]
]


@pytest.mark.parametrize(("reader", "kind"), CASES)
def test_a_hostile_file_is_refused_cleanly(reader: str, kind: str, tmp_path: Path) -> None:
    name, command, huge = READERS[reader]
    path = tmp_path / "in" / name
    path.parent.mkdir()
    (huge if kind == "huge number" else NOT_DATA[kind])(path)
    refused_cleanly(command(path))


def test_a_device_named_directly_is_refused_cleanly() -> None:
    for command in (["show", "/dev/zero"], ["replay", "--target", "impl", "/dev/urandom"]):
        refused_cleanly(kvpool(command))
    refused_cleanly(kvpool([*CONFORM, "--expect", "/dev/zero"]))


def test_the_campaign_catches_a_reader_that_waits_on_a_fifo(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The planted fault: the trace reader as it was (a plain read of the path)."""
    monkeypatch.setattr(trace_files, "read_regular_file", lambda p, *_: Path(p).read_bytes())
    path = tmp_path / "t.itf.json"
    os.mkfifo(path)
    with deadline(2):
        result = CliRunner().invoke(main, ["show", str(path)])
    with pytest.raises(AssertionError, match="hangs"):
        refused_cleanly(result)


# --- fields that must not be trusted ------------------------------------------------------


def _with_profile(seed: Path, profile: str) -> str:
    text = seed.read_text(encoding="utf-8")
    return text.replace('"profile":"seed"', f'"profile":"{profile}"').replace(
        '"profile": "seed"', f'"profile": "{profile}"'
    )


@pytest.mark.parametrize("named", ["secret.toml", "~/secret.toml", "../secret.toml"])
def test_a_profile_field_is_never_read_as_a_path(named: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.toml"
    secret.write_text(f'base = "seed"\ndescription = "{SECRET}"\n[knobs.x]\nvalue = 1\n')
    absolute = str(secret) if named == "secret.toml" else named
    seed = next(p for p in SEED_VECTORS if "seed" in p.parts)
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    (vectors / "v.itf.json").write_text(_with_profile(seed, absolute), encoding="utf-8")
    trace = tmp_path / "t.itf.json"
    trace.write_text(_with_profile(SEED_TRACES[0], absolute), encoding="utf-8")
    for result in (
        kvpool(["replay", "--target", "impl", str(trace)]),
        kvpool(["vectors", "check", str(vectors), "--target", "impl"]),
    ):
        refused_cleanly(result)
        assert SECRET not in result.output
        assert "knobs" not in result.output


def test_a_trace_recorded_with_a_profile_file_replays_with_profile_on_the_command_line(
    tmp_path: Path,
) -> None:
    own = tmp_path / "own.toml"
    own.write_text('base = "seed"\ndescription = "mine"\n')
    trace = tmp_path / "t.itf.json"
    trace.write_text(_with_profile(SEED_TRACES[0], str(own)), encoding="utf-8")
    asked = kvpool(["replay", "--target", "impl", str(trace)])
    refused_cleanly(asked)
    assert "--profile FILE" in asked.output
    result = kvpool(["replay", "--target", "impl", "--profile", str(own), str(trace)])
    assert result.exit_code == 0, result.output


def _expectation(text: str) -> str:
    return (
        "[[expected]]\n"
        'rule = "free-held"\n'
        'situation = "a hostile pattern"\n'
        'upstream = "https://example.org/x"\n'
        f"text = '{text}'\n"
    )


def test_a_backtracking_regular_expression_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text(_expectation("^((a|.)*)*!$"), encoding="utf-8")
    result = kvpool([*CONFORM, "--expect", str(path)])
    refused_cleanly(result)
    assert "not a regular expression" in result.output


def test_a_pattern_of_many_stars_on_a_long_message_answers_at_once() -> None:
    from kvpool.conformance.machines.pool.expectations import holds

    message = "a" * 100_000
    with deadline(5):
        assert not holds(message, "*a*" * 16 + "!")
        assert holds(message, "a*a*a")
