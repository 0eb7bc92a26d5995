"""Every code example in the docs runs, as the convention in
``kvpool.conformance.tools.reference.examples`` says; a failure names the page and line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.tools.reference.cli_page import kvpool_group
from kvpool.conformance.tools.reference.console_output import matches, words
from kvpool.conformance.tools.reference.examples import (
    ExampleFailed,
    ExampleSkipped,
    Fence,
    PageRun,
    console_commands,
    find_fences,
    kvpool_commands,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def page_fences() -> dict[str, list[Fence]]:
    """Every page's fences, by its path from the repository root (``docs/guide/x.md``)."""
    found = {}
    for path in sorted(DOCS.rglob("*.md")):
        name = str(path.relative_to(DOCS.parent))
        found[name] = find_fences(path.read_text(encoding="utf-8"), name)
    return found


FENCES = page_fences()
CASES = [
    pytest.param(page, i, id=fence.where)
    for page, fences in FENCES.items()
    for i, fence in enumerate(fences)
    if fence.runs
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, PageRun]:
    """One run per page, shared by its examples (each page gets a fresh scratch dir)."""
    made: dict[str, PageRun] = {}
    for page, fences in FENCES.items():
        scratch = tmp_path_factory.mktemp(Path(page).stem)
        made[page] = PageRun(fences, scratch, kvpool_group(main))
    return made


@pytest.mark.parametrize(("page", "index"), CASES)
def test_example(page: str, index: int, runs: dict[str, PageRun]) -> None:
    try:
        runs[page].run(index)
    except ExampleSkipped as skipped:
        pytest.skip(str(skipped))
    except ExampleFailed as failed:
        if isinstance(failed.__cause__, ExampleFailed):  # a command's exit status: no traceback
            pytest.fail(str(failed), pytrace=False)
        raise  # a Python example's error: its traceback quotes the page's lines


def test_the_docs_have_examples_to_run() -> None:
    assert len(CASES) >= 10, "the docs promise runnable examples"


# --- the runner itself catches what it should --------------------------------------------


def run_page(text: str, tmp_path: Path, index: int | None = None) -> PageRun:
    fences = find_fences(text, "planted.md")
    run = PageRun(fences, tmp_path, kvpool_group(main))
    last = len(fences) - 1 if index is None else index
    run.run(last)
    return run


def test_a_broken_python_example_fails_naming_its_line(tmp_path: Path) -> None:
    page = "# P\n\n```python\nx = 1\nassert x == 2, 'planted'\n```\n"
    with pytest.raises(ExampleFailed, match=r"planted\.md:3: AssertionError: planted"):
        run_page(page, tmp_path)


def test_python_examples_share_a_namespace_and_see_titled_files(tmp_path: Path) -> None:
    page = (
        '```python title="helper.py"\nVALUE = 41\n```\n\n'
        "```python\nimport helper\nanswer = helper.VALUE + 1\n```\n\n"
        "```python\nassert answer == 42\n```\n"
    )
    run_page(page, tmp_path)
    assert (tmp_path / "helper.py").read_text() == "VALUE = 41\n"


def test_a_failing_kvpool_command_fails_the_example(tmp_path: Path) -> None:
    page = "```console\n$ kvpool conform --target nosuchmodule:make_pool\n```\n"
    with pytest.raises(ExampleFailed, match=r"planted\.md:2: .*exited 2, the page expects 0"):
        run_page(page, tmp_path)


def test_an_exit_directive_sets_the_expected_status(tmp_path: Path) -> None:
    page = "<!-- exit: 2 -->\n```console\n$ kvpool conform --target nosuchmodule:f\n```\n"
    run_page(page, tmp_path)
    wrong = "<!-- exit: 1 -->\n```console\n$ kvpool conform --target nosuchmodule:f\n```\n"
    with pytest.raises(ExampleFailed, match="exited 2, the page expects 1"):
        run_page(wrong, tmp_path)


def test_a_skip_directive_skips_and_other_fences_do_not_run(tmp_path: Path) -> None:
    page = "<!-- skip: needs a GPU -->\n```python\nraise SystemExit(3)\n```\n"
    with pytest.raises(ExampleSkipped, match="needs a GPU"):
        run_page(page, tmp_path)
    shown = "```sh\nexit 1\n```\n\n```text\n$ kvpool nonsense\n```\n"
    assert not any(f.runs for f in find_fences(shown, "x.md"))


def test_an_indented_fence_and_continued_commands_are_read() -> None:
    page = (
        "- item\n\n    ```console\n    $ kvpool conform \\\n        --max-examples 5\n"
        "    out\n    ```\n"
    )
    (fence,) = find_fences(page, "x.md")
    assert fence.language == "console"
    assert kvpool_commands(fence.body) == [(0, "kvpool conform --max-examples 5")]


def test_an_example_after_a_failed_one_names_the_earlier_failure(tmp_path: Path) -> None:
    page = "```python\nraise ValueError('first')\n```\n\n```python\nundefined_name\n```\n"
    with pytest.raises(ExampleFailed, match=r"earlier example .*planted\.md:1"):
        run_page(page, tmp_path, index=1)


# --- what a command prints is compared with what the page shows ------------------------

RUN = "kvpool conform --max-examples 2 --seed 1 --machine pool --level safety --no-coverage"


def printed_today(tmp_path: Path) -> str:
    """What :data:`RUN` prints now, as a page would show it."""
    runner = CliRunner(env={"COLUMNS": "80"})
    result = runner.invoke(kvpool_group(main), shlex.split(RUN)[1:])
    assert result.exit_code == 0, result.output
    return "\n".join(line.rstrip() for line in result.output.strip("\n").split("\n"))


def console_page(output: str, directive: str = "") -> str:
    return f"{directive}```console\n$ {RUN}\n{output}\n```\n"


def test_the_output_the_page_shows_is_compared_and_drift_fails(tmp_path: Path) -> None:
    today = printed_today(tmp_path)
    run_page(console_page(today), tmp_path)
    steps = re.search(r"│ +(\d+) │ +[\d,]+ │ +15 │", today)
    assert steps is not None
    drifted = today.replace(steps.group(0), steps.group(0).replace(steps[1], "999", 1))
    with pytest.raises(ExampleFailed, match=r"prints something else than the page shows"):
        run_page(console_page(drifted), tmp_path)


def test_rates_times_and_column_widths_are_not_drift(tmp_path: Path) -> None:
    today = printed_today(tmp_path)
    wider = {"steps/s": " 1,234,567 ", "time": " 98.7s "}  # wider than today's
    lines, header, changed = [], [], 0
    for line in today.split("\n"):
        if line.startswith("┃"):
            header = [cell.strip() for cell in line.split("┃")]
        elif line.startswith("│ pool/safety"):
            cells = line.split("│")
            for i, name in enumerate(header):
                if name in wider:
                    cells[i], changed = wider[name], changed + 1
            line = "│".join(cells)
        lines.append(line)
    assert changed == 2  # the results table's rate and time, stacked or not
    run_page(console_page("\n".join(lines)), tmp_path)


def test_elided_lines_match_any_lines_but_the_rest_must_follow_in_order(tmp_path: Path) -> None:
    today = printed_today(tmp_path).split("\n")
    elided = "\n".join([today[0], "...", today[-1]])
    run_page(console_page(elided), tmp_path)
    swapped = "\n".join([today[-1], "...", today[0]])
    with pytest.raises(ExampleFailed, match="prints something else"):
        run_page(console_page(swapped), tmp_path)


def test_a_varies_directive_runs_the_command_without_comparing(tmp_path: Path) -> None:
    directive = "<!-- output: varies: planted -->\n"
    run_page(console_page("not what it prints", directive), tmp_path)
    (fence,) = find_fences(console_page("x", directive), "x.md")
    assert fence.varies == "planted" and fence.directive is None


def test_only_clock_bounded_campaigns_say_their_output_varies() -> None:
    varies = [f for fences in FENCES.values() for f in fences if f.varies is not None]
    for fence in varies:
        assert fence.varies, f"{fence.where}: <!-- output: varies: --> names no reason"
        commands = [c for _, c in kvpool_commands(fence.body)]
        assert all("--seconds" in c or "--hours" in c for c in commands), fence.where


def test_the_pages_show_what_their_commands_print() -> None:
    shown = [
        (fence.where, c)
        for fences in FENCES.values()
        for fence in fences
        if fence.language == "console" and fence.varies is None and fence.directive is None
        for c in console_commands(fence.body)
        if c.output.strip()
    ]
    assert len(shown) >= 10, "the pages show outputs, and the tests compare them"


def test_a_table_reads_the_same_at_any_wrapping() -> None:
    narrow = [
        "┃ mutant         ┃ result ┃",
        "│ duplicate-kept │ killed │",
        "│ -on-eviction   │        │",
    ]
    wide = ["┃ mutant                     ┃ result ┃", "│ duplicate-kept-on-eviction │ killed │"]
    assert (
        words(narrow) == words(wide) == ["mutant", "result", "duplicate-kept-on-eviction", "killed"]
    )
    cut = ["┃ mutant                   ┃ result ┃", "│ duplicate-kept-on-evict… │ killed │"]
    assert words(cut) != words(wide)


def test_durations_commits_and_the_scratch_folder_are_masked_but_keys_are_not() -> None:
    page = "at commit 3c0093d, vllm 0.34.0.dev1+g4ba787ec9, 1.5s, in /tmp/s1/x, key 068c455c"
    today = "at commit 9abbb52, vllm 0.34.0.dev1+g0123456789, 12.0s, in /tmp/s2/x, key 068c455c"
    assert not matches(page, today)  # the scratch folder differs, and is not named
    shown = page.replace("/tmp/s1", "/tmp/s2")
    assert matches(shown, today, scratch="/tmp/s2")
    assert not matches(shown, today.replace("068c455c", "068c455d"), scratch="/tmp/s2")
