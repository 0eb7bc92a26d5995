"""The pytest plugin in fresh projects: off until asked, one flag runs the conformance
machines as tests, a planted bug fails with its shrunk sequence and a replayable trace."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main

pytest_plugins = ["pytester"]


def examples_by_test(junit: Path) -> dict[str, int]:
    """Each test's ``kvpool_examples`` property, as the JUnit XML report holds it."""
    counts = {}
    for case in ET.parse(junit).iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "kvpool_examples":
                counts[case.get("name", "")] = int(prop.get("value", "-1"))
    return counts


def test_one_flag_adds_a_test_per_run_and_a_conforming_pool_passes(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest("--kvpool-target=mypool:make_pool", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "kvpool: target mypool:make_pool, settings dev *",
            "*collected 4 items",
            "kvpool::pool/safety PASSED*",
            "kvpool::pool/order PASSED*",
            "kvpool::pool/robustness PASSED*",
            "kvpool::requests/pool PASSED*",
            "*= kvpool conformance =*",
            "*kvpool conform — target mypool:make_pool, profile seed*",
        ]
    )


def test_a_planted_bug_fails_with_its_shrunk_sequence_and_a_replayable_trace(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = project.runpytest(
        "--kvpool-target=mypool:ReversedFree", "--kvpool-machine=pool", "--kvpool-seed=1"
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ kvpool pool/order _*",
            "mypool:ReversedFree pool/order: get_new_blocks: expected blocks *, got blocks *",
            "Nonconformance: pool/order",
            "  Shrunk action sequence (* actions) on a pool built as",
            "*1. get_new_blocks(num_blocks=*",
            "*free_blocks(blocks=*",
            "*get_new_blocks(num_blocks=1)  <- diverges here",
            "  Trace written to kvpool-traces/mypool_ReversedFree-pool-order-1.itf.json",
            "  pytest file:     kvpool-traces/test_mypool_ReversedFree_pool_order_1.py",
            "  Replay it with:  kvpool replay kvpool-traces/mypool_ReversedFree-pool-order-1.itf"
            ".json --target mypool:ReversedFree",
            "Run this test again: pytest --kvpool-target=mypool:ReversedFree "
            "--kvpool-machine=pool --kvpool-level=order --kvpool-settings=dev --kvpool-seed=1",
            "FAILED kvpool::pool/order - mypool:ReversedFree pool/order: get_new_blocks*",
        ]
    )
    trace = project.path / "kvpool-traces" / "mypool_ReversedFree-pool-order-1.itf.json"
    assert trace.is_file()
    assert (trace.parent / "test_mypool_ReversedFree_pool_order_1.py").is_file()
    monkeypatch.syspath_prepend(str(project.path))
    replay = CliRunner().invoke(main, ["replay", str(trace), "--target", "mypool:ReversedFree"])
    assert replay.exit_code == 1, replay.output
    assert "<- diverges here" in replay.output
    assert "expected blocks" in replay.output


def test_without_a_target_the_plugin_adds_no_tests(project: pytest.Pytester) -> None:
    project.makepyfile(test_own="def test_own():\n    assert True\n")
    assert "--kvpool-target" in project.runpytest("--help").stdout.str()  # it is loaded
    result = project.runpytest("-v")
    result.assert_outcomes(passed=1)
    # no kvpool items, header or summary (paths and the plugin list may name the package)
    lines = [
        line
        for line in result.stdout.lines
        if "kvpool" in line and not line.startswith(("platform ", "plugins: ", "cachedir: "))
    ]
    assert lines == [], lines
    assert not (project.path / "kvpool-traces").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--kvpool-target=nosuchmodule:make_pool"],
            "kvpool: --kvpool-target: cannot import module 'nosuchmodule'*",
        ),
        (["--kvpool-target=mypool:missing"], "*module 'mypool' has no attribute 'missing'*"),
        (
            ["--kvpool-target=mypool:ReversedFree", "--kvpool-level=safety,speed"],
            "kvpool: --kvpool-level: unknown speed; choose from safety, order, robustness, events",
        ),
        (
            ["--kvpool-target=mypool:make_pool", "--kvpool-profile=vllm-9"],
            "kvpool: --kvpool-profile: *vllm-9*",
        ),
    ],
)
def test_a_wrong_option_is_a_usage_error_that_names_it(
    project: pytest.Pytester, args: list[str], message: str
) -> None:
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "passed" not in result.stdout.str()


def test_a_factory_that_cannot_build_a_pool_is_a_usage_error(project: pytest.Pytester) -> None:
    project.makepyfile(broken="def make_pool(**options):\n    raise RuntimeError('no GPU')\n")
    result = project.runpytest("--kvpool-target=broken:make_pool")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: kvpool: --kvpool-target: 'broken:make_pool' could not build a pool: "
            "RuntimeError: no GPU"
        ]
    )


def test_the_one_line_recipe_makes_the_same_tests(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_conformance="""
        from kvpool.conformance.pytest_plugin import conformance_tests

        test_conformance = conformance_tests("mypool:make_pool")
        test_reversed = conformance_tests("mypool:ReversedFree", machines="pool", levels="order")
        """
    )
    result = project.runpytest("-v", "--kvpool-seed=1")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_conformance.py::test_conformance[[]pool/safety[]] PASSED*",
            "test_conformance.py::test_conformance[[]requests/pool[]] PASSED*",
            "test_conformance.py::test_reversed[[]pool/order[]] FAILED*",
            "*Shrunk action sequence*",
            "*<- diverges here",
            "  Trace written to kvpool-traces/mypool_ReversedFree-pool-order-1.itf.json",
            "Run this test again: pytest 'test_conformance.py::test_reversed[[]pool/order[]]' "
            "--kvpool-settings=dev --kvpool-seed=1",
        ]
    )


def test_a_wrong_level_in_the_recipe_fails_its_module_with_the_level_named(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_conformance="""
        from kvpool.conformance.pytest_plugin import conformance_tests

        test_conformance = conformance_tests("mypool:make_pool", levels="speed")
        """
    )
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*PlanError: --kvpool-level: unknown speed*"])


def test_the_settings_profile_sets_how_many_examples_each_test_draws(
    project: pytest.Pytester,
) -> None:
    counts = {}
    for name in ("dev", "ci"):
        junit = project.path / f"{name}.xml"
        result = project.runpytest(
            "--kvpool-target=mypool:make_pool",
            "--kvpool-machine=pool",
            "--kvpool-level=safety",
            f"--kvpool-settings={name}",
            f"--junitxml={junit}",
        )
        result.assert_outcomes(passed=1)
        counts[name] = examples_by_test(junit)["pool/safety"]
        if name == "ci":  # derandomized: seed 0, every run
            result.stdout.fnmatch_lines(["kvpool: *settings ci (150 examples *), seed 0, *"])
    assert 30 <= counts["dev"] < 60, counts
    assert 150 <= counts["ci"] < 300, counts


def test_a_project_can_resize_a_settings_profile_in_its_conftest(
    project: pytest.Pytester,
) -> None:
    project.makeconftest(
        """
        from hypothesis import settings

        settings.register_profile("kvpool-dev", max_examples=5, stateful_step_count=10)
        """
    )
    junit = project.path / "small.xml"
    # a subprocess: the registered profile must not outlive this test
    result = project.runpytest_subprocess(
        "--kvpool-target=mypool:make_pool",
        "--kvpool-machine=pool",
        "--kvpool-level=safety",
        f"--junitxml={junit}",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["kvpool: *settings dev (5 examples of up to 10 steps)*"])
    assert examples_by_test(junit)["pool/safety"] < 15


def test_the_ini_file_sets_the_target_once_and_an_empty_flag_turns_it_off(
    project: pytest.Pytester,
) -> None:
    project.makeini(
        """
        [pytest]
        kvpool_target = mypool:make_pool
        kvpool_machine = pool
        kvpool_level = safety, order
        kvpool_trace_dir = traces
        """
    )
    project.makepyfile(test_own="def test_own():\n    assert True\n")
    result = project.runpytest("-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["kvpool: *traces to */traces", "kvpool::pool/order PASSED*"])
    project.runpytest("-k", "kvpool").assert_outcomes(passed=2, deselected=1)
    project.runpytest("-k", "not kvpool").assert_outcomes(passed=1, deselected=2)
    off = project.runpytest("--kvpool-target=")
    off.assert_outcomes(passed=1)
    assert not re.search(r"kvpool::|kvpool: target", off.stdout.str())
