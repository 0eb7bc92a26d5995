"""Profile files (`--profile FILE`, kvpool.spec.profile) and expectation files (`--expect
FILE`, kvpool.conformance.machines.pool.expectations) are total: any file is a Profile or one
ProfileFileError, an Expectations or one ExpectationsError. Raw bytes, the real files
broken in one to three places (written back as TOML or JSON), and deep nesting."""

from __future__ import annotations

import json
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hostile import FUZZ, ROOT, at_path, escapes, hostile_json, mangled, node_paths
from hypothesis import given
from hypothesis import strategies as st
from kvpool.conformance.machines.pool.expectations import ExpectationsError, read_expectations
from kvpool.spec.profile import ProfileFileError, load_profile_file

PROFILE_SEEDS = sorted((ROOT / "spec" / "profiles").glob("*.toml"))
EXPECT_SEEDS = sorted((ROOT / "tests" / "conformance" / "expectations").glob("*.toml")) + sorted(
    (ROOT / "findings").glob("*/expect.toml")
)


def toml_value(value: Any) -> str:
    """``value`` as a TOML inline value (tables inline, so any nesting is one line); a
    None, which TOML lacks, as an empty inline table."""
    if value is None:
        return "{}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)  # inf and nan come out as words TOML refuses
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    pairs = (f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
    return "{" + ", ".join(pairs) + "}"


def toml_text(document: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in document.items())


@st.composite
def broken_toml(draw: st.DrawFn, seeds: list[Path]) -> tuple[str, bytes]:
    """A seed file broken in one to three places, as TOML or JSON bytes (the suffix with
    it), sometimes cut short or not UTF-8."""
    document: Any = tomllib.loads(draw(st.sampled_from(seeds)).read_text(encoding="utf-8"))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(node_paths(document)))
        document = at_path(document, path, draw(hostile_json))
    suffix = draw(st.sampled_from([".toml", ".json"]))
    if suffix == ".json" or not isinstance(document, dict):
        text = json.dumps(document)
    else:
        try:
            text = toml_text(document)
        except RecursionError:
            text = "x = " + "[" * 5000
    data = text.encode("utf-8", "surrogatepass")
    return suffix, draw(st.one_of(st.just(data), mangled(data)))


def deep(suffix: str) -> st.SearchStrategy[tuple[str, bytes]]:
    openers = st.sampled_from([b"[", b"{a = "])
    return st.tuples(
        st.just(suffix),
        st.tuples(openers, st.integers(1, 100_000)).map(lambda p: b"base = " + p[0] * p[1]),
    )


def _in_file(suffix: str, data: bytes) -> tuple[tempfile.TemporaryDirectory[str], Path]:
    directory = tempfile.TemporaryDirectory()
    path = Path(directory.name) / f"f{suffix}"
    path.write_bytes(data)
    return directory, path


profile_inputs = st.one_of(
    st.tuples(st.just(".toml"), st.binary(max_size=300)),
    broken_toml(PROFILE_SEEDS).map(lambda p: (".toml", p[1])),
    deep(".toml"),
)
expect_inputs = st.one_of(
    st.tuples(st.sampled_from([".toml", ".json", ".txt"]), st.binary(max_size=300)),
    broken_toml(EXPECT_SEEDS),
    deep(".toml"),
)


@FUZZ
@given(profile_inputs)
def test_any_file_is_a_profile_or_one_profile_file_error(case: tuple[str, bytes]) -> None:
    directory, path = _in_file(*case)
    with directory:
        assert escapes(lambda: load_profile_file(path), ProfileFileError) is None


@FUZZ
@given(expect_inputs)
def test_any_file_is_expectations_or_one_expectations_error(case: tuple[str, bytes]) -> None:
    directory, path = _in_file(*case)
    with directory:
        assert escapes(lambda: read_expectations(path), ExpectationsError) is None


def test_the_seeds_read_so_the_breakage_is_what_the_fuzzing_adds() -> None:
    assert PROFILE_SEEDS and EXPECT_SEEDS
    for seed in PROFILE_SEEDS:
        document = tomllib.loads(seed.read_text(encoding="utf-8"))
        document.pop("releases", None)  # the built-in profiles' own key; a user's may not
        directory, path = _in_file(".toml", toml_text(document).encode())
        with directory:
            load_profile_file(path)
    for seed in EXPECT_SEEDS:
        read_expectations(seed)


@pytest.mark.parametrize("opener", ["[", "{a = "])
def test_deep_nesting_is_one_error_not_a_recursion_error(opener: str) -> None:
    """The crash this file's fuzzing found: tomllib parses nesting recursively, so a line
    of 100,000 openers escaped both readers as RecursionError."""
    directory, path = _in_file(".toml", ("base = " + opener * 100_000).encode())
    with directory:
        with pytest.raises(ProfileFileError, match="too deeply"):
            load_profile_file(path)
        with pytest.raises(ExpectationsError, match="too deeply"):
            read_expectations(path)
