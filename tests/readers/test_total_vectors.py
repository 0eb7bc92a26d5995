"""Vector directories are total: `kvpool vectors check DIR` and the standalone runner
(`python -m kvpool.conformance.tools.vectors.runner DIR --pool ...`) exit only with their
documented statuses (0 all pass, 1 a vector fails, 2 a file they cannot use) for any file
in DIR, never with a traceback."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hostile import FUZZ, SEED_VECTORS, broken_documents
from hypothesis import given
from hypothesis import strategies as st
from kvpool.conformance import bounds
from kvpool.conformance.cli import main
from kvpool.conformance.tools.vectors import runner

inputs = st.one_of(
    broken_documents(SEED_VECTORS),
    st.binary(max_size=200),
    st.just(b"[" * 100_000),
    st.just(b"\xff\xfe{}"),
)


def _directory(data: bytes) -> tempfile.TemporaryDirectory[str]:
    directory = tempfile.TemporaryDirectory()
    (Path(directory.name) / "v.itf.json").write_bytes(data)
    return directory


@FUZZ
@given(inputs)
def test_vectors_check_of_any_file_exits_0_1_or_2(data: bytes) -> None:
    with _directory(data) as directory:
        result = CliRunner().invoke(main, ["vectors", "check", directory, "--target", "impl"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in (0, 1, 2), result.output


@FUZZ
@given(inputs)
def test_the_standalone_runner_of_any_file_exits_0_1_or_2(data: bytes) -> None:
    with _directory(data) as directory, contextlib.redirect_stdout(io.StringIO()) as out:
        code = runner.main([directory, "--pool", "kvpool.impl:BlockPool"])
    assert code in (0, 1, 2), out.getvalue()


def test_the_runner_keeps_the_trace_size_bound() -> None:
    """The runner imports nothing from kvpool, so it writes the bound out: the same one."""
    assert runner.MAX_VECTOR_BYTES == bounds.MAX_TRACE_BYTES


def test_the_runner_names_a_vector_nested_too_deep() -> None:
    with _directory(b"[" * 100_000) as directory, contextlib.redirect_stdout(io.StringIO()) as out:
        code = runner.main([directory, "--pool", "kvpool.impl:BlockPool"])
    assert code == 2 and "RecursionError" in out.getvalue()
