"""The exit-status policy (``kvpool.conformance.exits``) is kept by every command: a table
of every command x {target crash, target ``sys.exit``, target ``KeyboardInterrupt``,
malformed input, kvpool crash, undecided}, each cell either run here, run by the test it
names, or saying why the case does not apply to that command. Also: the policy is printed
from its one definition (``--help``, the docs page, the README), ``--help`` loads no suite
code, the user's Ctrl-C exits 130, and a malformed engine entry is refused by name."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance import cli, exits
from kvpool.conformance.cli import COMMANDS, main
from kvpool.conformance.machines.pool import operations
from kvpool.conformance.tools.reference.fragments import expand
from kvpool.conformance.tools.vectors import runner

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
#: Twelve vectors of the seed profile: the pools below fail them quickly.
VECTORS = ROOT / "vectors" / "seed" / "get_new_blocks"
TRACE = VECTORS / "safety-3.itf.json"

CASES = (
    "target crash",
    "target sys.exit",
    "target KeyboardInterrupt",
    "malformed input",
    "kvpool crash",
    "undecided",
)
#: The pool of tests/conformance/ending_pools.py for each of the target's cases.
POOLS = {
    "target crash": "ending_pools:FreeCountCrashes",
    "target sys.exit": "ending_pools:ExitsOnAllocation",
    "target KeyboardInterrupt": "ending_pools:InterruptsOnAllocation",
}


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.chdir(tmp_path)  # failures write their traces here


@dataclass(frozen=True)
class Run:
    """A cell checked here: ``run(monkeypatch, tmp_path)`` gives (status, output)."""

    run: Callable[[pytest.MonkeyPatch, Path], tuple[int, str]]
    status: int


@dataclass(frozen=True)
class CoveredBy:
    """A cell checked by another test (too slow to run twice): ``test`` is FILE::NAME."""

    test: str
    status: int


@dataclass(frozen=True)
class NotApplicable:
    why: str


Cell = Run | CoveredBy | NotApplicable


def kvpool(*args: str) -> Callable[[pytest.MonkeyPatch, Path], tuple[int, str]]:
    def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[int, str]:
        result = CliRunner().invoke(main, list(args))
        return result.exit_code, result.output

    return run


def planted(
    where: object, name: str, *args: str
) -> Callable[[pytest.MonkeyPatch, Path], tuple[int, str]]:
    """``kvpool ARGS`` with ``where.name`` replaced by ``None``: calling it raises a
    ``TypeError`` inside kvpool's own code (a bug of kvpool, not of the target)."""

    def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[int, str]:
        monkeypatch.setattr(where, name, None)
        return kvpool(*args)(monkeypatch, tmp_path)

    return run


def with_file(
    name: str, text: str, *args: str
) -> Callable[[pytest.MonkeyPatch, Path], tuple[int, str]]:
    """``kvpool ARGS`` with ``{file}`` in ARGS the path of a file ``name`` holding ``text``
    (``{dir}``: its folder)."""

    def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[int, str]:
        folder = tmp_path / "input"
        folder.mkdir()
        path = folder / name
        path.write_text(text)
        words = [a.replace("{file}", str(path)).replace("{dir}", str(folder)) for a in args]
        return kvpool(*words)(monkeypatch, tmp_path)

    return run


def standalone(*args: str) -> Callable[[pytest.MonkeyPatch, Path], tuple[int, str]]:
    def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[int, str]:
        folder = tmp_path / "input"
        folder.mkdir()
        (folder / "bad.itf.json").write_text('{"#meta": 1}')
        words = [a.replace("{dir}", str(folder)) for a in args]
        return runner.main(words), ""

    return run


def runner_bug(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[int, str]:
    def broken(path: Path) -> object:
        raise ZeroDivisionError("planted in the runner")

    monkeypatch.setattr(runner, "read_vector", broken)
    return runner.main([str(VECTORS), "--pool", "kvpool.impl:BlockPool"]), ""


def harness_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[int, str]:
    # the harness's own index of the operation table loses an entry: drawing raises KeyError
    operations.named("get_new_blocks")  # the index is built
    index = {n: op for n, op in operations._Index.by_name.items() if n != "get_new_blocks"}
    monkeypatch.setattr(operations._Index, "by_name", index)
    return kvpool("conform", "--machine", "pool", "--level", "safety", "-n", "5", "--seed", "1")(
        monkeypatch, tmp_path
    )


def crosshair_tool_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[int, str]:
    pytest.importorskip("crosshair")
    from kvpool.conformance.tools.crosshair import command

    def check_targets(chosen: list[str], *_: object) -> list[command.CheckResult]:
        return [command.CheckResult(t, error="crosshair crashed (planted)") for t in chosen]

    monkeypatch.setattr(command, "check_targets", check_targets)
    return kvpool("crosshair", "--target", "flat.release_counts")(monkeypatch, tmp_path)


def malformed_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[int, str]:
    from kvpool.conformance.targets import registry

    points = dict(registry.registered())
    points["broken"] = importlib.metadata.EntryPoint(
        "broken", "ending_pools:NOT_AN_ENTRY", registry.GROUP
    )
    monkeypatch.setattr(registry, "registered", lambda: points)
    registry.engine.cache_clear()
    try:
        return kvpool("conform", "--target", "broken", "-n", "5")(monkeypatch, tmp_path)
    finally:
        registry.engine.cache_clear()


def target_runs(
    args: Callable[[str], list[str]], kvpool_crash: Cell, malformed: Cell
) -> dict[str, Cell]:
    """The three target cases (each pool of :data:`POOLS` through ``args``), then the rest."""
    cells: dict[str, Cell] = {
        case: Run(kvpool(*args(pool)), exits.EXIT_FINDING) for case, pool in POOLS.items()
    }
    cells["malformed input"] = malformed
    cells["kvpool crash"] = kvpool_crash
    return cells


NO_TARGET = "it runs no target's code"
DECIDES = "it always reaches a verdict: nothing it runs can answer 'unknown'"
SLOW_OR_NETWORK = "a live stream over ZMQ or a network namespace; its exit paths are tested in "


def table() -> dict[str, dict[str, Cell]]:
    """Every command's row (the standalone vectors runner's too)."""
    from kvpool.conformance.tools.vectors import check
    from kvpool.conformance.trace import record

    rows: dict[str, dict[str, Cell]] = {
        "conform": {
            **target_runs(
                lambda p: [
                    "conform",
                    "--target",
                    p,
                    "--machine",
                    "pool",
                    "--level",
                    "safety",
                    "-n",
                    "5",
                    "--seed",
                    "1",
                    "--no-coverage",
                ],
                Run(harness_index, exits.EXIT_BUG),
                Run(with_file("e.toml", "[[[", "conform", "--expect", "{file}"), exits.EXIT_USAGE),
            ),
            "undecided": NotApplicable(DECIDES + " (too few valid cases is status 3)"),
        },
        "replay": {
            **target_runs(
                lambda p: ["replay", str(TRACE), "--target", p],
                Run(planted(record, "state_json", "replay", str(TRACE)), exits.EXIT_BUG),
                Run(with_file("t.itf.json", "{", "replay", "{file}"), exits.EXIT_USAGE),
            ),
            "undecided": NotApplicable(DECIDES),
        },
        "vectors": {  # kvpool vectors check
            **target_runs(
                lambda p: ["vectors", "check", str(VECTORS), "--target", p],
                Run(
                    planted(check, "replay_each", "vectors", "check", str(VECTORS)), exits.EXIT_BUG
                ),
                Run(with_file("v.itf.json", "[1]", "vectors", "check", "{dir}"), exits.EXIT_USAGE),
            ),
            "undecided": NotApplicable(DECIDES),
        },
        "vectors runner": {  # python -m kvpool.conformance.tools.vectors.runner
            **{
                case: Run(standalone(str(VECTORS), "--pool", pool), exits.EXIT_FINDING)
                for case, pool in POOLS.items()
            },
            "malformed input": Run(
                standalone("{dir}", "--pool", "kvpool.impl:BlockPool"), exits.EXIT_USAGE
            ),
            "kvpool crash": Run(runner_bug, exits.EXIT_BUG),
            "undecided": NotApplicable(DECIDES),
        },
        "diff": {
            **target_runs(
                lambda p: ["diff", "impl", p, "--max-examples", "5", "--seed", "1"],
                NotApplicable(
                    "covered by the conform row: diff draws and judges with the same "
                    "engine, and its own modules are plain comparisons"
                ),
                Run(kvpool("diff", "impl", "no_such_module:pool"), exits.EXIT_USAGE),
            ),
            "undecided": NotApplicable(DECIDES),
        },
        "workload": {
            **target_runs(
                lambda p: ["workload", "--target", p, "-r", "5", "--seed", "1"],
                NotApplicable("covered by the conform row: the same request machine"),
                Run(kvpool("workload", "--prompt-tokens", "many"), exits.EXIT_USAGE),
            ),
            "undecided": NotApplicable(DECIDES),
        },
        "targets": {
            "target crash": NotApplicable(
                NO_TARGET + " (it builds one probe per engine, listed as unavailable when it fails)"
            ),
            "target sys.exit": NotApplicable(NO_TARGET),
            "target KeyboardInterrupt": NotApplicable(NO_TARGET),
            "malformed input": Run(malformed_engine, exits.EXIT_USAGE),
            "kvpool crash": NotApplicable("a listing: any crash is the group's exit 4 (conform)"),
            "undecided": NotApplicable(DECIDES),
        },
        "mutants": {
            "target crash": NotApplicable(
                "its targets are kvpool's own mutants: a crash only "
                "is scored a wrong kill (test_mutants.py)"
            ),
            "target sys.exit": NotApplicable("kvpool's own mutants never end the process"),
            "target KeyboardInterrupt": NotApplicable("kvpool's own mutants never do"),
            "malformed input": Run(kvpool("mutants", "--only", "no-such-mutant"), exits.EXIT_USAGE),
            "kvpool crash": CoveredBy(
                "test_mutants.py::test_an_adapter_that_cannot_read_the_pool_is_an_error_not_a_kill",
                exits.EXIT_BUG,
            ),
            "undecided": CoveredBy(
                "test_mutants.py::test_the_command_stops_when_the_unmutated_pool_fails",
                exits.EXIT_UNDECIDED,
            ),
        },
        "prove": {
            **{
                case: NotApplicable(NO_TARGET + ": it proves the spec's encoding") for case in POOLS
            },
            "malformed input": Run(kvpool("prove", "--blocks", "1"), exits.EXIT_USAGE),
            "kvpool crash": NotApplicable("a crash is the group's exit 4 (the conform row)"),
            "undecided": CoveredBy(
                "test_proofs_bmc.py::test_cli_is_undecided_when_the_fault_is_deeper_than_the_depth",
                exits.EXIT_UNDECIDED,
            ),
        },
        "crosshair": {
            **{
                case: NotApplicable(NO_TARGET + ": it searches the spec's contracts")
                for case in POOLS
            },
            "malformed input": Run(
                kvpool("crosshair", "--target", "flat.no_such_rule"), exits.EXIT_USAGE
            ),
            "kvpool crash": NotApplicable("a crash is the group's exit 4 (the conform row)"),
            "undecided": Run(crosshair_tool_error, exits.EXIT_UNDECIDED),
        },
        "docs": {  # kvpool docs build
            **{case: NotApplicable(NO_TARGET) for case in POOLS},
            "malformed input": Run(
                kvpool("docs", "build", "--config", "no-such-mkdocs.yml"), exits.EXIT_USAGE
            ),
            "kvpool crash": NotApplicable("a crash is the group's exit 4 (the conform row)"),
            "undecided": CoveredBy(
                "../docs/test_docs_command.py::test_build_fails_on_a_broken_link",
                exits.EXIT_UNDECIDED,
            ),
        },
        "show": {
            **{case: NotApplicable(NO_TARGET + ": it renders a recorded trace") for case in POOLS},
            "malformed input": Run(
                with_file("t.itf.json", "{", "show", "{file}"), exits.EXIT_USAGE
            ),
            "kvpool crash": NotApplicable("a crash is the group's exit 4 (the conform row)"),
            "undecided": NotApplicable(DECIDES),
        },
        "validate": {
            **{
                case: NotApplicable(NO_TARGET + ": it reads an engine's request log and stream")
                for case in POOLS
            },
            "malformed input": Run(
                with_file("log.jsonl", "{", "validate", "{file}", "{file}", "-p", "seed"),
                exits.EXIT_USAGE,
            ),
            "kvpool crash": NotApplicable("a crash is the group's exit 4 (the conform row)"),
            "undecided": NotApplicable(DECIDES),
        },
    }
    for name in ("bench", "fuzz", "monitor", "publish", "route-check", "profile", "rules"):
        rows[name] = _row_elsewhere(name)
    return rows


#: Commands whose cells are not run here, and why.
ELSEWHERE = {
    "bench": "it times kvpool's own pool against a vLLM release: no user target, and a "
    "timed run is too slow for this table; bad options exit 2 (click)",
    "fuzz": "a campaign of worker processes, each a conform run (the conform row); its "
    "statuses are tested in tests/fuzz/",
    "monitor": SLOW_OR_NETWORK + "tests/conformance/stream/",
    "publish": SLOW_OR_NETWORK + "tests/conformance/stream/",
    "route-check": SLOW_OR_NETWORK + "test_route_check.py",
    "profile": "it measures a profile with the conform machinery (the conform row)",
    "rules": "it prints the spec's rule texts: no input, no target, nothing undecided",
}


def _row_elsewhere(name: str) -> dict[str, Cell]:
    return {case: NotApplicable(ELSEWHERE[name]) for case in CASES}


def _cells() -> list[tuple[str, str]]:
    return [(command, case) for command, row in table().items() for case in row]


def test_the_table_has_every_command_and_every_case() -> None:
    rows = table()
    assert set(rows) == {*COMMANDS, "vectors runner"}
    for command, row in rows.items():
        assert tuple(row) == CASES or set(row) == set(CASES), command
        for case, cell in row.items():
            if isinstance(cell, NotApplicable):
                assert cell.why.strip(), (command, case)
            elif isinstance(cell, CoveredBy):
                file, _, name = cell.test.partition("::")
                assert f"def {name}(" in (HERE / file).read_text(), cell.test


@pytest.mark.parametrize(
    ("command", "case"),
    [(c, k) for c, k in _cells() if isinstance(table()[c][k], Run)],
)
def test_the_policy_holds(
    command: str, case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cell = table()[command][case]
    assert isinstance(cell, Run)
    status, output = cell.run(monkeypatch, tmp_path)
    assert status == cell.status, f"{command} x {case}: exit {status}\n{output}"
    if cell.status == exits.EXIT_FINDING and command != "vectors runner":
        assert "Traceback" not in output or "Nonconformance" in output, output


# --- the one definition, printed everywhere ------------------------------------------------


def test_the_readme_states_the_policy_as_defined() -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert exits.summary() in readme


def test_the_docs_page_is_generated_from_the_definition() -> None:
    page = (ROOT / "docs" / "guide" / "exit-status.md").read_text(encoding="utf-8")
    assert "<!-- kvpool:exit-statuses -->" in page
    assert "| 0 |" not in page  # no table typed by hand beside it
    built = expand(page, "guide/exit-status.md")
    assert exits.markdown_table() in built
    for status in exits.STATUSES:
        assert f"| {status.code} | {status.name} | {status.meaning} |" in built


def test_every_help_ends_with_the_policy() -> None:
    block = [line.strip() for line in exits.help_block().splitlines()[1:]]
    for args in (["--help"], ["conform", "--help"], ["vectors", "--help"]):
        output = CliRunner().invoke(main, args).output
        assert all(line in output for line in block), (args, output)


def test_the_runner_writes_out_the_same_statuses() -> None:
    assert (runner.EXIT_PASS, runner.EXIT_FINDING, runner.EXIT_USAGE) == (0, 1, 2)
    assert runner.EXIT_PASS == exits.EXIT_PASS and runner.EXIT_FINDING == exits.EXIT_FINDING
    assert runner.EXIT_USAGE == exits.EXIT_USAGE and runner.EXIT_BUG == exits.EXIT_BUG
    assert runner.EXIT_INTERRUPTED == exits.EXIT_INTERRUPTED


def test_each_command_line_is_said_by_the_commands_own_help() -> None:
    for name, entry in COMMANDS.items():
        command = cli.load_command(name)
        assert command.name in (name, name.replace("-", "_"), "show_trace"), name
        own = [word.strip(".,:;()") for word in (command.help or "").split()]
        said = [word.strip(".,:;()") for word in entry.short_help.split()]
        assert said[0] == own[0], (name, entry.short_help)
        assert set(said) <= set(own), (name, set(said) - set(own))


# --- --help and --version load no suite code ----------------------------------------------


def test_help_loads_neither_the_spec_nor_hypothesis_nor_rich() -> None:
    code = (
        "import sys\n"
        "from kvpool.conformance.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('hypothesis', 'rich')"
        " or m.startswith(('kvpool.spec', 'kvpool.impl', 'kvpool.conformance.machines.pool')))\n"
        "print('HEAVY', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "HEAVY []" in done.stdout, done.stdout


def _kvpool_script() -> str:
    found = shutil.which("kvpool", path=str(Path(sys.executable).parent))
    assert found is not None
    return found


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"kvpool {importlib.metadata.version('kvpool-spec')}"


# --- the user's Ctrl-C, told from the target's own KeyboardInterrupt ------------------------


def _interrupted(command: list[str], tmp_path: Path, wait_for: str) -> tuple[int, str]:
    """Run ``command``, send SIGINT once it printed ``wait_for``; its status and stderr."""
    env = {**os.environ, "PYTHONPATH": str(HERE), "COLUMNS": "120"}
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        assert wait_for in line, line
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, err


def test_ctrl_c_exits_130_without_a_traceback(tmp_path: Path) -> None:
    status, err = _interrupted(
        [_kvpool_script(), "conform", "--seed", "1", "-n", "100000", "--no-coverage"],
        tmp_path,
        "kvpool conform: target",
    )
    assert status == exits.EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "interrupted" in err


def test_the_targets_own_keyboard_interrupt_is_a_finding_not_an_interruption(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--target",
            POOLS["target KeyboardInterrupt"],
            "--machine",
            "pool",
            "--level",
            "safety",
            "-n",
            "5",
            "--seed",
            "1",
            "--no-coverage",
        ],
    )
    assert result.exit_code == exits.EXIT_FINDING, result.output
    assert "ended the process: KeyboardInterrupt" in result.output


# --- the spec's self-check, under every interpreter flag ----------------------------------


def test_the_spec_self_check_fails_a_broken_spec_under_python_O() -> None:
    code = (
        "from kvpool.conformance.machines.pool import lockstep\n"
        "from kvpool.conformance.machines.pool.levels import SAFETY\n"
        "from kvpool.conformance.targets.loading import load_target\n"
        "from kvpool.spec import SEED, PoolConfig\n"
        "lockstep.broken_invariants = lambda state: ['planted']\n"
        "assert False, 'asserts are on'\n"  # under -O this line does nothing
        "try:\n"
        "    lockstep.LockstepRun(load_target('impl')[0], SEED, SAFETY, PoolConfig(4))\n"
        "except lockstep.SpecSelfCheckFailed as exc:\n"
        "    print('CAUGHT', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, check=False
    )
    assert "CAUGHT the spec broke its own invariants ['planted']" in done.stdout, done


# --- engine entries validated when loaded -------------------------------------------------


def test_a_malformed_engine_entry_is_named_and_does_not_break_the_others(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    status, output = malformed_engine(monkeypatch, tmp_path)
    assert status == exits.EXIT_USAGE, output
    assert "the engine entry 'broken' (ending_pools:NOT_AN_ENTRY) is malformed" in output
    assert "load_pool()" in output
    from kvpool.conformance.targets import registry

    points = dict(registry.registered())
    points["broken"] = importlib.metadata.EntryPoint(
        "broken", "ending_pools:NOT_AN_ENTRY", registry.GROUP
    )
    monkeypatch.setattr(registry, "registered", lambda: points)
    registry.engine.cache_clear()
    try:
        fine = CliRunner().invoke(
            main, ["conform", "--machine", "pool", "--level", "safety", "-n", "3", "--seed", "1"]
        )
    finally:
        registry.engine.cache_clear()
    assert fine.exit_code == exits.EXIT_PASS, fine.output


# --- a refusal counts only if the target raised it ---------------------------------------


def _refusing_run() -> object:
    from kvpool.conformance.machines.pool.levels import ROBUSTNESS
    from kvpool.conformance.machines.pool.lockstep import LockstepRun
    from kvpool.conformance.targets.loading import load_target
    from kvpool.spec import SEED, PoolConfig

    return LockstepRun(load_target("impl")[0], SEED, ROBUSTNESS, PoolConfig(4))


def test_the_targets_own_refusal_counts() -> None:
    from kvpool.spec import FreeBlocks

    run = _refusing_run()
    run.apply(FreeBlocks((1,)))  # type: ignore[attr-defined]  # block 1 is free: refused
    assert run.record.refusals["free-held"] == 1  # type: ignore[attr-defined]


def test_kvpools_own_exception_is_never_counted_as_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvpool.conformance.engines.vllm_api.adapter import VllmApiTarget
    from kvpool.spec import FreeBlocks, get_profile

    run = _refusing_run()
    # the adapter fails before it calls the pool: a KeyError raised in kvpool's own spec
    monkeypatch.setattr(
        VllmApiTarget, "_call", lambda self, action: get_profile("planted-no-such-profile")
    )
    with pytest.raises(KeyError, match="planted-no-such-profile"):
        run.apply(FreeBlocks((1,)))  # type: ignore[attr-defined]
    assert run.record.refusals["free-held"] == 0  # type: ignore[attr-defined]


def test_the_runners_own_exception_is_never_counted_as_a_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    vectors = str(ROOT / "vectors" / "seed" / "free_blocks")
    assert runner.main([vectors, "--pool", "kvpool.impl:BlockPool"]) == exits.EXIT_PASS
    capsys.readouterr()

    def no_blocks(self: object, ids: list[int], pool: object = None) -> list[object]:
        raise IndexError("planted: the runner cannot find the blocks")

    monkeypatch.setattr(runner.Replayer, "blocks", no_blocks)
    assert runner.main([vectors, "--pool", "kvpool.impl:BlockPool"]) == exits.EXIT_USAGE
    assert "cannot replay" in capsys.readouterr().out


# --- whose code raised --------------------------------------------------------------------


def test_whose_code_raised_is_read_from_the_traceback() -> None:
    from kvpool.conformance.ending import raised_by_target
    from kvpool.conformance.tools.vectors.runner import read_vector
    from kvpool.spec import get_profile

    def caught(call: Callable[[], object]) -> BaseException:
        try:
            call()
        except BaseException as exc:  # SystemExit too
            return exc
        raise AssertionError("nothing raised")

    # kvpool's own code, also where the standard library raised on its behalf
    assert not raised_by_target(caught(lambda: get_profile("no-such-profile")))
    assert not raised_by_target(caught(lambda: read_vector(Path("/nonexistent/v.itf.json"))))
    # code outside kvpool (this test stands for a user's pool), and a pool compiled from text
    assert raised_by_target(caught(lambda: sys.exit(0)))
    namespace: dict[str, object] = {}
    source = "def crash():\n    raise KeyError(1)\n"
    exec(compile(source, "<mutant m: impl/x.py>", "exec"), namespace)
    assert raised_by_target(caught(namespace["crash"]))  # type: ignore[arg-type]


def test_kvpool_targets_lists_the_others_then_names_the_malformed_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvpool.conformance.targets import command, registry

    points = {name: point for name, point in registry.registered().items() if name == "impl"}
    points["broken"] = importlib.metadata.EntryPoint(
        "broken", "ending_pools:NOT_AN_ENTRY", registry.GROUP
    )
    monkeypatch.setattr(registry, "registered", lambda: points)
    monkeypatch.setattr(command, "registered", lambda: points)  # its own name for it
    registry.engine.cache_clear()
    try:
        result = CliRunner().invoke(main, ["targets"])
    finally:
        registry.engine.cache_clear()
    assert result.exit_code == exits.EXIT_USAGE, result.output
    assert "kvpool's own linked-list BlockPool" in result.output  # impl is listed
    assert "profiles (--profile)" in result.output  # and every table after it
    assert "the engine entry 'broken' (ending_pools:NOT_AN_ENTRY) is malformed" in result.output
