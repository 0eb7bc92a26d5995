"""vLLM's scheduler at the engine machine runs from an installed vLLM only: without one,
or naming a release other than the installed one, or a tree, it is a usage error (exit 2)
saying what to install, never a run of something else."""

from __future__ import annotations

import importlib.util

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main

if importlib.util.find_spec("vllm") is not None:
    pytest.skip("a vLLM is installed here (test_vllm_scheduler_engine.py runs it)",
                allow_module_level=True)  # fmt: skip


def conform(target: str) -> tuple[int, str]:
    args = ["conform", "--machine", "engine", "--target", target, "--seed", "1", "-n", "5"]
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


def test_a_release_not_installed_says_what_to_install() -> None:
    status, output = conform("vllm==0.33.0")
    assert status == 2, output
    assert "pip install vllm==0.33.0" in output and "Traceback" not in output


def test_a_tree_or_a_fork_is_refused_at_the_engine_machine(tmp_path: object) -> None:
    for target in (f"vllm@{tmp_path}", "aphrodite==0.24.1"):
        status, output = conform(target)
        assert status == 2, output
        assert "installed vLLM only" in output, output
