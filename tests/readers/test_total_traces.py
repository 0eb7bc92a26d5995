"""Trace files (conformance/trace/files.py, itf.py) are total: any file is a Trace or one
TraceFileError; `kvpool show` and `kvpool replay` exit only with their documented
statuses (show: 0, or 2 for a file it cannot use; replay: 0 conforms, 1 diverges, 2 a file
or target it cannot use). Raw bytes, and real traces broken in one to three places."""

from __future__ import annotations

import tempfile
from pathlib import Path

from click.testing import CliRunner
from hostile import FUZZ, SEED_TRACES, broken_documents, escapes
from hypothesis import given
from hypothesis import strategies as st
from kvpool.conformance.cli import main
from kvpool.conformance.trace.files import TraceFileError, read_trace
from kvpool.conformance.trace.model import Trace

inputs = st.one_of(st.binary(max_size=300), broken_documents(SEED_TRACES))


def _in_file(data: bytes) -> tuple[tempfile.TemporaryDirectory[str], Path]:
    directory = tempfile.TemporaryDirectory()
    path = Path(directory.name) / "t.itf.json"
    path.write_bytes(data)
    return directory, path


@FUZZ
@given(inputs)
def test_any_file_is_a_trace_or_one_trace_file_error(data: bytes) -> None:
    directory, path = _in_file(data)
    with directory:
        outcome: list[Trace] = []
        assert escapes(lambda: outcome.append(read_trace(path)), TraceFileError) is None


def _run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@FUZZ
@given(inputs, st.sampled_from(["table", "markdown"]))
def test_show_of_any_file_exits_0_or_2(data: bytes, fmt: str) -> None:
    directory, path = _in_file(data)
    with directory:
        code, out = _run(["show", "--format", fmt, str(path)])
    assert code in (0, 2), out


@FUZZ
@given(broken_documents(SEED_TRACES))
def test_replay_of_any_file_exits_0_1_or_2(data: bytes) -> None:
    directory, path = _in_file(data)
    with directory:
        code, out = _run(["replay", "--target", "impl", "--manager", "impl", str(path)])
    assert code in (0, 1, 2), out


def test_every_seed_reads_so_the_breakage_is_what_the_fuzzing_adds() -> None:
    for seed in SEED_TRACES:
        assert isinstance(read_trace(seed), Trace), seed


def _old_state_cells(state: dict[str, object]) -> tuple[str, str, str]:
    """`kvpool show`'s state cells before they were total: a key set that is not a list
    was iterated as one."""
    from kvpool.conformance.trace import show

    keys = " ".join(
        f"{b}:" + ",".join(str(k)[:6] for k in (ks.get("#set", []) if isinstance(ks, dict) else []))
        for b, ks in show._pairs(state.get("keys"))
    )
    return "", "", keys


def _key_set_not_a_list() -> bytes:
    """The crash the fuzzing found in the old `kvpool show`: a real trace whose keyed
    block's key set holds a number instead of a list (schema-valid: the state cells are
    shown as recorded, not decoded)."""
    import json

    from hostile import at_path, node_paths

    seed = next(p for p in SEED_TRACES if p.parent.name == "free_blocks")
    document = json.loads(seed.read_text(encoding="utf-8"))
    where = next(p for p in node_paths(document) if p[-1:] == ("#set",))
    return json.dumps(at_path(document, where, 5)).encode()


def test_show_of_a_key_set_that_is_not_a_list_renders() -> None:
    directory, path = _in_file(_key_set_not_a_list())
    with directory:
        assert _run(["show", str(path)])[0] == 0


def test_the_show_property_catches_the_old_crash() -> None:
    """The planted fault: the old state cells; the property fails on the found input."""
    import pytest
    from kvpool.conformance.trace import show

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(show, "state_cells", _old_state_cells)
        with pytest.raises(AssertionError):
            test_show_of_any_file_exits_0_or_2.hypothesis.inner_test(  # type: ignore[attr-defined]
                _key_set_not_a_list(), "table"
            )
