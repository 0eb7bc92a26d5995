"""The documented GitHub Actions workflow runs the plugin and uploads the traces it writes
when it fails; its kvpool flags are ones the plugin accepts."""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest_plugins = ["pytester"]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "workflow" / "github-actions.md"
#: The install the recipe needs: kvpool-spec's own wheel (the package index has none).
WHEEL_AND_PYTEST = re.compile(r"pip install \S*kvpool_spec-[^\s/]+-py3-none-any\.whl pytest")
FROM_THE_INDEX = re.compile(r"pip install (?:[^\n]* )?['\"]?kvpool-spec\b")


def workflow() -> dict[Any, Any]:
    fences = re.findall(r"^```yaml\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.M | re.S)
    assert len(fences) == 1, f"{PAGE.name} should show one workflow, found {len(fences)}"
    loaded = yaml.safe_load(fences[0])
    assert isinstance(loaded, dict)
    return loaded


def pytest_runs(job: dict[str, Any]) -> list[tuple[int, list[str]]]:
    """The job's steps that run pytest, by index, with each command's arguments."""
    runs = []
    for index, step in enumerate(job["steps"]):
        for line in str(step.get("run", "")).splitlines():
            words = shlex.split(line)
            if words[:1] == ["pytest"]:
                runs.append((index, words[1:]))
    return runs


def flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return values[-1] if values else None


def workflow_problems(loaded: dict[Any, Any]) -> list[str]:
    """What keeps ``loaded`` from checking a pool and keeping its traces, job by job."""
    problems = []
    triggers = loaded.get("on", loaded.get(True))  # YAML 1.1 reads a bare `on` as true
    if not {"push", "pull_request"} <= set(triggers or ()):
        problems.append("not run on push and pull_request")
    for name, job in (loaded.get("jobs") or {}).items():
        steps = job.get("steps", [])
        uses = [str(step.get("uses", "")) for step in steps]
        for action in ("actions/checkout@", "actions/setup-python@"):
            if not any(u.startswith(action) for u in uses):
                problems.append(f"{name}: no {action}")
        installs = " ".join(str(s.get("run", "")) for s in steps)
        if not WHEEL_AND_PYTEST.search(installs):
            problems.append(f"{name}: kvpool-spec's wheel and pytest are not installed")
        if FROM_THE_INDEX.search(installs):
            problems.append(f"{name}: installs kvpool-spec from the index, which has none")
        runs = pytest_runs(job)
        if len(runs) != 1:
            problems.append(f"{name}: {len(runs)} pytest steps, not one")
            continue
        index, args = runs[0]
        if not flag(args, "--kvpool-target"):
            problems.append(f"{name}: pytest runs without --kvpool-target")
        if flag(args, "--kvpool-settings") not in ("ci", "deep"):
            problems.append(f"{name}: neither the ci nor the deep settings")
        trace_dir = (flag(args, "--kvpool-trace-dir") or "").rstrip("/")
        if not trace_dir:
            problems.append(f"{name}: no --kvpool-trace-dir")
        uploads = [
            s
            for s in steps[index + 1 :]
            if str(s.get("uses", "")).startswith("actions/upload-artifact@")
        ]
        if len(uploads) != 1:
            problems.append(f"{name}: {len(uploads)} uploads after pytest, not one")
            continue
        if uploads[0].get("if") != "failure()":
            problems.append(f"{name}: the upload is not `if: failure()`")
        path = str(uploads[0].get("with", {}).get("path", "")).rstrip("/")
        if path != trace_dir:
            problems.append(f"{name}: uploads {path!r}, traces go to {trace_dir!r}")
    if not loaded.get("jobs"):
        problems.append("no jobs")
    return problems


def test_the_documented_workflow_runs_the_plugin_and_uploads_its_traces_on_failure() -> None:
    assert workflow_problems(workflow()) == []


def _first_job(loaded: dict[Any, Any]) -> dict[str, Any]:
    job: dict[str, Any] = next(iter(loaded["jobs"].values()))
    return job


def _upload(job: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload"))


def _drop_target(job: dict[str, Any]) -> None:
    for step in job["steps"]:
        if "pytest " in str(step.get("run", "")):
            step["run"] = re.sub(r"--kvpool-target=\S+ ?", "", step["run"])


def _install_from_the_index(job: dict[str, Any]) -> None:
    for step in job["steps"]:
        if "kvpool_spec-" in str(step.get("run", "")):
            step["run"] = re.sub(r"\S*kvpool_spec-\S+\.whl", "kvpool-spec", step["run"])


@pytest.mark.parametrize(
    ("plant", "problem"),
    [
        (lambda job: _upload(job).pop("if"), "the upload is not `if: failure()`"),
        (lambda job: _upload(job)["with"].update(path="traces/"), "uploads 'traces'"),
        (_drop_target, "pytest runs without --kvpool-target"),
        (lambda job: job["steps"].remove(_upload(job)), "0 uploads after pytest"),
        (_install_from_the_index, "installs kvpool-spec from the index"),
    ],
    ids=["upload-always", "wrong-path", "no-target", "no-upload", "from-the-index"],
)
def test_the_check_catches_a_broken_workflow(plant: Any, problem: str) -> None:
    broken = copy.deepcopy(workflow())
    plant(_first_job(broken))
    assert any(problem in p for p in workflow_problems(broken)), workflow_problems(broken)


def test_the_push_job_uses_the_ci_settings() -> None:
    settings = {
        flag(pytest_runs(job)[0][1], "--kvpool-settings")
        for job in workflow()["jobs"].values()
        if job.get("if") != "github.event_name == 'schedule'"
    }
    assert settings == {"ci"}


def test_the_workflow_flags_are_the_plugins_own(pytester: pytest.Pytester) -> None:
    for job in workflow()["jobs"].values():
        for _, args in pytest_runs(job):
            kvpool_args = [a for a in args if a.startswith("--kvpool-")]
            assert kvpool_args
            config = pytester.parseconfig(*kvpool_args)
            for arg in kvpool_args:
                name, value = arg.removeprefix("--").split("=", 1)
                assert str(config.getoption(name.replace("-", "_"))) == value
