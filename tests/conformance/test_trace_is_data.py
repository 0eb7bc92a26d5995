"""A trace file is data, never code: replay, show and vectors never import, load or
download what a file names on its own. A built-in pool (impl, spec) may come from the file;
anything else the user names on the command line, and the error prints that command."""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm import distribution as wheel
from kvpool.conformance.engines.vllm import entry as vllm_entry
from kvpool.conformance.machines.requests.target import RequestSetup
from kvpool.conformance.trace.files import write_pytest, write_trace
from kvpool.conformance.trace.model import Trace, TraceMeta
from kvpool.conformance.trace.record import record
from kvpool.conformance.trace.replay import replay_file
from kvpool.conformance.trace.trust import NamedInFile, choose
from kvpool.spec import FreeBlocks, GetNewBlocks, PoolConfig
from kvpool.spec.manager import Admit, Finish, ManagerConfig

ACTIONS = (GetNewBlocks(2), FreeBlocks((1, 2)), GetNewBlocks(1))
#: A module that leaves a file beside itself when it is imported.
PLANTED = """\
from pathlib import Path

Path(__file__).with_name("IMPORTED").write_text("the trace's module ran")

from kvpool.impl import BlockPool


def make_pool(**kwargs):
    return BlockPool(**kwargs)


def make_manager(setup, profile):
    from kvpool.conformance.engines.builtin.impl_manager import impl_manager_target

    return impl_manager_target(setup, profile)
"""


def kvpool(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "2000"})


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding ``planted.py``, importable (on sys.path and the working
    directory); returns the file its import would write."""
    (tmp_path / "planted.py").write_text(PLANTED, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "planted", raising=False)
    return tmp_path / "IMPORTED"


def pool_trace(path: Path, target: str, **meta: str) -> Path:
    return write_trace(
        Trace(TraceMeta(target, "seed", "pool", "order", PoolConfig(4), **meta), ACTIONS), path
    )


def manager_trace(path: Path, manager: str) -> Path:
    setup = RequestSetup(ManagerConfig(4), PoolConfig(16))
    meta = TraceMeta("impl", "seed", "requests", "manager", setup, manager=manager)
    return write_trace(Trace(meta, (Admit("r1", (1, 2, 3, 4, 5)), Finish("r1"))), path)


def refused(result: Result, command: str) -> None:
    """Exit 2, one error line that names the module and prints ``command``, no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and line.endswith(f"run: {command}"), line


def test_replay_of_a_trace_naming_a_module_runs_nothing_and_names_the_command(
    tmp_path: Path, planted: Path
) -> None:
    trace = pool_trace(tmp_path / "t.itf.json", "planted:make_pool")
    refused(kvpool("replay", str(trace)), f"kvpool replay {trace} --target planted:make_pool")
    assert not planted.exists() and "planted" not in sys.modules
    for fmt in ("table", "markdown"):
        shown = kvpool("show", "--format", fmt, str(trace))
        assert shown.exit_code == 0 and "get_new_blocks(num_blocks=1)" in shown.output
    with pytest.raises(NamedInFile):
        replay_file(trace)
    assert not planted.exists() and "planted" not in sys.modules
    # named on the command line, the same module is loaded: the plant works
    assert kvpool("replay", str(trace), "--target", "planted:make_pool").exit_code == 0
    assert planted.exists()


def test_a_named_manager_and_a_diffs_pool_b_are_not_loaded_either(
    tmp_path: Path, planted: Path
) -> None:
    trace = manager_trace(tmp_path / "m.itf.json", "planted:make_manager")
    refused(kvpool("replay", str(trace)), f"kvpool replay {trace} --manager planted:make_manager")
    versus = pool_trace(tmp_path / "d.itf.json", "impl", versus="planted:make_pool")
    refused(kvpool("replay", str(versus)), f"kvpool replay {versus} --versus planted:make_pool")
    both = pool_trace(tmp_path / "b.itf.json", "planted:make_pool", versus="planted:make_pool")
    refused(
        kvpool("replay", str(both)),
        f"kvpool replay {both} --target planted:make_pool --versus planted:make_pool",
    )
    assert not planted.exists() and "planted" not in sys.modules
    assert kvpool("replay", str(trace), "--manager", "planted:make_manager").exit_code == 0
    assert planted.exists()


def test_vectors_check_loads_only_its_own_target(tmp_path: Path, planted: Path) -> None:
    corpus = tmp_path / "corpus"
    pool_trace(corpus / "seed" / "x" / "order-1.itf.json", "planted:make_pool")
    checked = kvpool("vectors", "check", str(corpus))
    assert checked.exit_code == 0, checked.output  # replayed on the default target, impl
    assert "1 passed, 0 failed" in checked.output
    manager_trace(corpus / "seed" / "x" / "manager-1.itf.json", "planted:make_manager")
    not_a_vector = kvpool("vectors", "check", str(corpus))
    assert not_a_vector.exit_code == 2 and "not a test vector" in not_a_vector.output
    assert not planted.exists() and "planted" not in sys.modules


@pytest.fixture
def no_vllm_loading(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every attempt to load or download a vLLM release, recorded instead of done."""
    calls: list[str] = []

    def spy(what: str) -> object:
        def called(*args: object, **kwargs: object) -> object:
            calls.append(f"{what}{args}")
            raise AssertionError(f"{what} was called")

        return called

    monkeypatch.setattr(vllm_entry, "load_vllm", spy("load_vllm"))
    monkeypatch.setattr(wheel, "cached_release", spy("cached_release"))
    monkeypatch.setattr(wheel, "seed_cache", spy("seed_cache"))
    return calls


def test_a_vllm_tree_named_in_a_trace_is_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_vllm_loading: list[str]
) -> None:
    core = tmp_path / "tree" / "vllm" / "v1" / "core"
    core.mkdir(parents=True)
    ran = tmp_path / "IMPORTED"
    (core / "block_pool.py").write_text(f"open({str(ran)!r}, 'w').write('ran')\n")
    target = f"vllm@{tmp_path / 'tree'}"
    trace = pool_trace(tmp_path / "t.itf.json", target)
    refused(kvpool("replay", str(trace)), f"kvpool replay {trace} --target {target}")
    assert not ran.exists() and no_vllm_loading == []


@pytest.mark.parametrize("target", ["vllm==0.33.0", "vllm", "vllm-mlx"])
def test_a_release_named_in_a_trace_is_not_downloaded_or_imported(
    tmp_path: Path, target: str, no_vllm_loading: list[str]
) -> None:
    trace = pool_trace(tmp_path / "t.itf.json", target)
    refused(kvpool("replay", str(trace)), f"kvpool replay {trace} --target {target}")
    assert no_vllm_loading == [] and "vllm_mlx" not in sys.modules


def test_the_printed_command_quotes_what_the_file_says(tmp_path: Path) -> None:
    trace = pool_trace(tmp_path / "t.itf.json", "x:y; touch pwned\x1b]0;title\x07")
    result = kvpool("replay", str(trace))
    assert result.exit_code == 2
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "--target 'x:y; touch pwned?]0;title?'" in result.output
    assert "--target x:y; touch" not in result.output


def test_built_in_names_come_from_the_file_and_the_command_line_wins() -> None:
    meta = TraceMeta("impl", "seed", "pool", "order", PoolConfig(4), versus="spec")
    assert choose(meta).target == "impl" and choose(meta).versus == "spec"
    elsewhere = TraceMeta("mypkg:make", "seed", "pool", "order", PoolConfig(4))
    assert choose(elsewhere, "impl").target == "impl"
    with pytest.raises(NamedInFile) as error:
        choose(elsewhere)
    assert error.value.options == (("--target", "mypkg:make"),)


def test_the_pytest_file_beside_a_trace_imports_only_kvpool_and_holds_no_code_from_it(
    tmp_path: Path,
) -> None:
    hostile = 'x"""\nimport os; os.system("touch pwned")\n"""\\'
    meta = TraceMeta(f"mypkg:{hostile}", "seed", "pool", "order", PoolConfig(4), message=hostile)
    trace = write_trace(Trace(meta, ACTIONS), tmp_path / "t.itf.json")
    tree = ast.parse(write_pytest(trace, Trace(meta, ACTIONS)).read_text())
    kinds = [type(node).__name__ for node in tree.body]
    assert kinds == ["Expr", "ImportFrom", "ImportFrom", "Assign", "FunctionDef"], kinds
    imported = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert imported == {"pathlib", "kvpool.conformance.trace.replay"}
    (call,) = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "replay_file"
    ]
    target = next(k.value for k in call.keywords if k.arg == "target")
    assert isinstance(target, ast.Constant) and target.value == meta.target


MALFORMED = {
    "empty": "",
    "not JSON": "{'states': [}",
    "a list": "[1, 2]",
    "no states": json.dumps({"#meta": {"format": "ITF", "kvpool": {}}, "vars": ["action"]}),
    "no target": None,  # a valid trace with #meta.kvpool.target removed
    "a string for a block count": None,
}


def malformed(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "bad.itf.json"
    text = MALFORMED[name]
    if text is None:
        good = json.loads((pool_trace(tmp_path / "good.itf.json", "impl")).read_text())
        if name == "no target":
            del good["#meta"]["kvpool"]["target"]
        else:
            good["states"][1]["action"]["num_blocks"] = "2"
        text = json.dumps(good)
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_file_is_one_line_and_exit_2_everywhere(tmp_path: Path, name: str) -> None:
    path = malformed(tmp_path, name)
    for args in (("replay",), ("show",), ("show", "--format", "markdown")):
        result = kvpool(*args, str(path))
        assert result.exit_code == 2, (args, result.output)
        (line,) = result.output.strip().splitlines()
        assert line.startswith("error: ") and "bad.itf.json" in line, line
    (tmp_path / "good.itf.json").unlink(missing_ok=True)
    checked = kvpool("vectors", "check", str(tmp_path))
    assert checked.exit_code == 2 and checked.output.startswith("error: "), checked.output


def test_the_standalone_vector_runner_loads_only_its_pool_and_reports_bad_files(
    tmp_path: Path, planted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvpool.conformance.tools.vectors import runner as vector_runner

    corpus = tmp_path / "corpus"
    meta = TraceMeta("impl", "seed", "pool", "order", PoolConfig(4))
    recorded = record(Trace(meta, ACTIONS))  # a vector: every step's outcome recorded
    write_trace(Trace(replace(meta, target="planted:make_pool"), ACTIONS, recorded.steps,
                      recorded.initial), corpus / "order-1.itf.json")  # fmt: skip
    assert vector_runner.main([str(corpus), "--pool", "kvpool.impl:BlockPool"]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out
    assert not planted.exists() and "planted" not in sys.modules
    (corpus / "order-1.itf.json").write_text('{"#meta": {}}')
    assert vector_runner.main([str(corpus), "--pool", "kvpool.impl:BlockPool"]) == 2
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("error: cannot replay") and "order-1.itf.json" in line, line
