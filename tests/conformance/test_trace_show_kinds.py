"""`kvpool show` renders every kind of trace the suite writes, in both formats: the pool
machine at each level, the request machine on a pool and on a manager, a diff, a test
vector, a committed finding and a bare (unrecorded) trace. Each rendering is checked for
its content: every step's action, the diverging step marked, its verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st
from kvpool.conformance.cli import main
from kvpool.conformance.machines.engine.trace_file import SUFFIX as ENGINE_SUFFIX
from kvpool.conformance.machines.engine.trace_file import read_engine_trace
from kvpool.conformance.tools.diff.command import diff
from kvpool.conformance.trace import show
from kvpool.conformance.trace.files import read_trace, write_trace
from kvpool.conformance.trace.model import Trace, TraceMeta
from kvpool.spec import FreeBlocks, GetNewBlocks, PoolConfig

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
#: Wide enough that no cell of the table format wraps.
WIDE = {"COLUMNS": "2000"}

#: Each run of the suite that writes a trace: (kind, kvpool conform arguments).
CONFORM_RUNS = {
    "pool-safety": ("--target", "faulty_pools:TouchForgetsQueue", "--level", "safety"),
    "pool-order": ("--target", "faulty_pools:CachedToFront", "--level", "order"),
    "pool-robustness": ("--target", "faulty_pools:DoubleFreeAccepted", "--level", "robustness"),
    "requests-pool": (
        "--target",
        "faulty_pools:StaleKeyAfterReuse",
        "--machine",
        "requests",
        "--manager",
        "none",
    ),
    "requests-manager": (
        "--machine",
        "requests",
        "--manager",
        "faulty_managers:make_HeadFirstFree",
    ),
}


def kvpool(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=WIDE)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One trace file of each kind, written the way a user's run writes it."""
    import sys

    sys.path.insert(0, str(HERE))
    found: dict[str, Path] = {}
    for kind, args in CONFORM_RUNS.items():
        out = tmp_path_factory.mktemp(kind)
        machine = () if "--machine" in args else ("--machine", "pool")
        result = kvpool(
            "conform", "--no-coverage", "--max-findings", "1", "--seed", "1",
            "--trace-dir", str(out), *machine, *args,
        )  # fmt: skip
        assert result.exit_code == 1, result.output
        (found[kind],) = out.glob("*.itf.json")
    out = tmp_path_factory.mktemp("diff")
    result = CliRunner().invoke(
        diff,
        ["spec", "spec", "--profile-a", "vllm-0.26", "--profile-b", "vllm-0.27", "-n", "60",
         "--seed", "5", "--trace-dir", str(out)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    (found["diff"],) = out.glob("*.itf.json")
    found["vector"] = ROOT / "vectors" / "seed" / "free_blocks" / "robustness-3.itf.json"
    found["finding"] = next((ROOT / "findings" / "vllm-0.33.0").glob("pool-robustness-*.itf.json"))
    bare = Trace(
        TraceMeta("impl", "seed", "pool", "safety", PoolConfig(4)),
        (GetNewBlocks(2), FreeBlocks((1, 2))),
    )
    found["bare"] = write_trace(bare, tmp_path_factory.mktemp("bare") / "bare.itf.json")
    return found


KINDS = [*CONFORM_RUNS, "diff", "vector", "finding", "bare"]
DIVERGES = {*CONFORM_RUNS, "diff", "finding"}


@pytest.mark.parametrize("kind", KINDS)
def test_the_table_shows_every_step_and_the_divergence(kind: str, traces: dict[str, Path]) -> None:
    trace = read_trace(traces[kind])
    result = kvpool("show", str(traces[kind]))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for i, step in enumerate(trace.steps, 1):
        row = next((ln for ln in lines if re.match(rf"^│ {i} +│", ln)), None)
        assert row is not None, f"no row {i} in\n{result.output}"
        assert show.action_text(step.action) in row
    step = trace.diverging_step
    if kind in DIVERGES:
        assert step == len(trace.steps), "the suite's traces end at their divergence"
        assert lines[-1] == f"step {step} diverges: {trace.steps[-1].verdict}"
    else:
        assert step is None and "diverges" not in result.output


@pytest.mark.parametrize("kind", KINDS)
def test_markdown_has_one_row_per_step_and_the_diverging_one_bold(
    kind: str, traces: dict[str, Path]
) -> None:
    trace = read_trace(traces[kind])
    result = kvpool("show", "--format", "markdown", str(traces[kind]))
    assert result.exit_code == 0, result.output
    header, rule, *rows = [ln for ln in result.output.splitlines() if ln.startswith("|")]
    assert rule.count("---") == header.count("|") - 1
    assert len(rows) == len(trace.steps)
    for i, (row, step) in enumerate(zip(rows, trace.steps, strict=True), 1):
        cells = row.strip("|").split(" | ")
        assert len(cells) == header.count("|") - 1, row
        action = show.action_text(step.action).replace("|", "\\|")
        if i == trace.diverging_step:
            assert cells[1] == f"**{action}**" and cells[-1].strip() == f"**{step.verdict}**"
        else:
            assert cells[1] == action and cells[-1].strip() == "ok"


def test_a_request_trace_shows_the_tables_and_what_the_manager_answered(
    traces: dict[str, Path],
) -> None:
    for kind in ("requests-pool", "requests-manager"):
        result = kvpool("show", "--format", "markdown", str(traces[kind]))
        assert result.exit_code == 0, result.output
        assert "| keys | tables | expected | actual | verdict |" in result.output
        assert re.search(r"\| r\d+: \[\d", result.output), "a request's block tables"
        assert re.search(r"\| \d+ computed, tables \[", result.output), "a Scheduled answer"


def test_a_diff_trace_names_its_outcome_columns_a_and_b(traces: dict[str, Path]) -> None:
    result = kvpool("show", "--format", "markdown", str(traces["diff"]))
    assert "| # | action | free queue | ref counts | keys | A | B | verdict |" in result.output
    assert "diff: A spec (profile vllm-0.26) against B spec (profile vllm-0.27)" in result.output


FINDINGS = sorted((ROOT / "findings").rglob("*.itf.json"))


@pytest.mark.parametrize("path", FINDINGS, ids=[f"{p.parent.name}/{p.name}" for p in FINDINGS])
def test_every_committed_finding_renders(path: Path) -> None:
    if path.name.endswith(ENGINE_SUFFIX):  # an engine machine's trace: its own reader
        engine_trace = read_engine_trace(path)
        result = kvpool("show", str(path))
        assert result.exit_code == 0, result.output
        assert f"engine trace of {engine_trace.target}" in result.output
        assert "fails here" in result.output
        return
    trace = read_trace(path)
    for fmt in ("table", "markdown"):
        result = kvpool("show", "--format", fmt, str(path))
        assert result.exit_code == 0, result.output
        assert show.action_text(trace.actions[-1]) in result.output.replace("\\|", "|")


#: The field names of recorded outcomes and states, so that drawn records look like them.
FIELDS = ["tag", "value", "result", "fired", "tables", "copies", "#tup", "#map", "#set", "kind",
          "num_computed_tokens", "#unserializable"]  # fmt: skip
#: Any JSON value, as a trace file may hold it in a step's outcome or state.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
TAGS = st.sampled_from(
    ["Returned", "Refused", "Raised", "Scheduled", "Bool", "Nothing", "Blocks", "Events", "Key"]
)
#: An outcome shaped like a recorded one: a tag, and a record of known fields or any value.
OUTCOME = st.fixed_dictionaries(
    {"tag": TAGS, "value": JSON | st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=5)}
)


@settings(max_examples=300, deadline=None)
@given(JSON | OUTCOME, JSON)
def test_any_recorded_outcome_or_state_renders_as_text(outcome: object, state: object) -> None:
    assert isinstance(show.outcome_text(outcome), str)
    cells = {"free_queue": state, "ref_cnt": state, "keys": state, "tables": state}
    assert all(isinstance(c, str) for c in show.state_cells(cells))
    assert isinstance(show.tables_cell(cells), str)


def test_what_a_file_says_is_shown_as_text_never_as_markup_or_terminal_codes(
    tmp_path: Path, traces: dict[str, Path]
) -> None:
    data = json.loads(traces["pool-order"].read_text())
    data["states"][-1]["verdict"] = "[/red] [bold]x\x1b[31m\x07"
    data["states"][-1]["actual"] = {"tag": "Raised", "value": "[/]"}
    path = tmp_path / "marked.itf.json"
    path.write_text(json.dumps(data))
    for fmt in ("table", "markdown"):
        result = kvpool("show", "--format", fmt, str(path))
        assert result.exit_code == 0, result.output
        assert "[/red] [bold]x?[31m?" in result.output and "raised: [/]" in result.output
        assert "\x1b" not in result.output and "\x07" not in result.output
