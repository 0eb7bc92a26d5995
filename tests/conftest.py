"""Engine tests that cannot run fail in CI instead of being skipped; an xdist worker's
session end is not cut short by its own gateway.

An engine's tests skip, and say what to install, when its extra is missing (numpy for
LMDeploy, xxhash for nano-vllm, torch for SGLang, triton for SGLang's paged kernels) or
its wheel cannot be downloaded. On a developer's machine that is a convenience; in CI
(``KVPOOL_REQUIRE_ENGINES=1``, set by ``.ci/run``) such a skip would hide the engine's
whole suite, so it is reported as a failure naming the reason. Skips for anything else
(an opt-in comparison, say) stay skips.

Under ``pytest -n``, a worker reports its results and only then runs the terminal-summary
hooks and unconfigures; the controller, having all results, stops the workers at once,
and execnet's worker side sends its own process a SIGINT when that end takes over five
seconds (``WorkerGateway._terminate_execution``). On a loaded machine it can (importing
Hypothesis for its summary hook in a worker that ran no Hypothesis test took that long
here), and a KeyboardInterrupt traceback was seen after a passing run (issue 38). So a worker
ignores SIGINT from its session's end on, before it reports its results (a worker whose
summary began more than five seconds after that report, on a loaded machine, was cut
when the guard waited for the summary): the user's Ctrl-C still reaches the controller,
which ends the run, and execnet still ends a worker that takes ten seconds more.
"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Generator, Iterator
from typing import Any

import pytest

#: What the reason of a skip for a missing engine says: an install line or a download.
MISSING_ENGINE = (
    "pip install -e '.[",
    "pip install triton",
    "could not download",
)


def required() -> bool:
    return os.environ.get("KVPOOL_REQUIRE_ENGINES", "") not in ("", "0")


def engine_skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The reason of ``report`` if it is a skip for a missing engine, else ``None``."""
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    reason = str(report.longrepr[2])
    return reason if any(m in reason for m in MISSING_ENGINE) else None


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = engine_skip_reason(report)
    if reason is not None and required():
        report.outcome = "failed"
        report.longrepr = (
            f"KVPOOL_REQUIRE_ENGINES is set, so this engine test may not skip: {reason}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[Any]:
    outcome = yield
    _fail(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[Any]:
    outcome = yield
    _fail(outcome.get_result())


@pytest.hookimpl(tryfirst=True)
@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker (not a pytest a test started)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap() -> Iterator[None]:
    """What the tests before this module left alive is frozen out of the cyclic collector's
    reach (``gc.freeze``) before the module runs.

    A suite worker runs thousands of tests in one process and keeps millions of objects
    alive (imported modules, engines' loaded releases, cached fixtures); every full
    collection walked them all, and the bench's and the adapters' timed or explicit
    ``gc.collect()`` calls did so on every call (the bench file alone: 30 CPU-s in a worker,
    3 alone). Frozen objects are still freed by reference counting when they die; only
    garbage cycles among them would wait, and the collection just before the freeze leaves
    none. Tests see the same objects: nothing a test creates is frozen while it runs."""
    gc.collect()
    gc.freeze()
    yield
