"""``--target`` read once: the grammar, the registry of engines (entry points), and forks
loaded under their own package name."""

from __future__ import annotations

import re
import shutil
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.targets import registry
from kvpool.conformance.targets.description import Form
from kvpool.conformance.targets.errors import TargetLoadError, TargetUsageError
from kvpool.conformance.targets.loading import choose_profile, load_manager, load_target
from kvpool.conformance.targets.registry import GROUP, EngineEntry, describe_target
from kvpool.spec import PoolConfig, get_profile


@pytest.mark.parametrize(
    ("text", "engine", "form", "version", "path", "options"),
    [
        ("impl", "impl", Form.BUILT_IN, None, None, ()),
        ("vllm", "vllm", Form.INSTALLED, None, None, ()),
        ("vllm==0.33.0", "vllm", Form.RELEASE, "0.33.0", None, ()),
        ("vllm@./a,b/tree", "vllm", Form.PATH, None, "a,b/tree", ()),
        ("lmdeploy", "lmdeploy", Form.RELEASE, "0.18.0", None, ()),
        ("sglang,page=2", "sglang", Form.RELEASE, "0.4.6.post5", None, (("page", "2"),)),
        ("sglang@/x/y,page=drawn", "sglang", Form.PATH, None, "/x/y", (("page", "drawn"),)),
        ("nanovllm-fork", "nanovllm-fork", Form.BUILT_IN, None, None, ()),
        ("aphrodite==0.24.1", "aphrodite", Form.RELEASE, "0.24.1", None, ()),
        ("mypkg.pool:make_pool", "", Form.FACTORY, None, None, ()),
    ],
)
def test_each_form_is_read_into_one_description(
    text: str,
    engine: str,
    form: Form,
    version: str | None,
    path: str | None,
    options: tuple[tuple[str, str], ...],
) -> None:
    described = describe_target(text)
    assert (described.text, described.engine, described.form) == (text, engine, form)
    assert described.version == version and described.options == options
    assert described.path == (Path(path) if path is not None else None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nosuchengine", "unknown target 'nosuchengine': the engines are aphrodite, impl"),
        ("impl==1.0", "impl takes impl, not the ==version form"),
        ("vllm,page=2", "vllm takes no options after a comma"),
        ("sglang,pages=2", "not 'pages=2'"),
        ("nanovllm-fork@/x", "not the @path form"),
        ("vllm==latest", "not a vLLM release number"),
        ("my pool:make", "write your own factory as module:attribute"),
        ("", "names no target"),
    ],
)
def test_a_text_that_names_nothing_is_one_usage_error(text: str, message: str) -> None:
    with pytest.raises(TargetUsageError, match=re.escape(message)):
        describe_target(text)


def test_the_command_line_refuses_an_unknown_engine_with_the_forms() -> None:
    result = CliRunner().invoke(main, ["conform", "--target", "vlm==0.33.0"])
    assert result.exit_code == 2, result.output
    assert "unknown target 'vlm'" in result.output and "NAME==VERSION" in result.output
    assert "vllm" in result.output and "Traceback" not in result.output


def test_every_built_in_engine_registers_through_the_entry_point_group() -> None:
    names = {point.name for point in metadata.entry_points(group=GROUP)}
    assert {"impl", "spec", "vllm", "aphrodite", "vllm-mlx", "lmdeploy", "sglang"} <= names
    assert {"nanovllm", "nanovllm-fork"} <= names
    for name in names:
        assert isinstance(registry.engine(name), EngineEntry)


class ToyEntry(EngineEntry):
    """A third party's engine: impl's pool under another name, its own profile."""

    name = "toy"
    forms = {"toy": "a toy engine"}  # noqa: RUF012 (a test's class)

    def load_pool(self, described):  # type: ignore[no-untyped-def]
        return load_target("impl")[0], "toy"

    def profile(self, described):  # type: ignore[no-untyped-def]
        return registry.ProfileChoice("vllm-0.33", "the toy's own")


def test_a_third_party_engine_is_imported_only_when_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module = types.ModuleType("toy_engine_kvpool")
    module.ENTRY = ToyEntry()  # type: ignore[attr-defined]
    imported: list[str] = []
    real = metadata.entry_points

    class Point(metadata.EntryPoint):
        def load(self) -> object:
            imported.append(self.value)
            return module.ENTRY  # type: ignore[attr-defined]

    toy = Point("toy", "toy_engine_kvpool:ENTRY", GROUP)

    def points(**select: str) -> list[metadata.EntryPoint]:
        return [*real(**select), toy] if select.get("group") == GROUP else list(real(**select))

    monkeypatch.setattr(registry.metadata, "entry_points", points)
    registry.engine.cache_clear()
    try:
        assert "toy" in registry.registered() and imported == []
        describe_target("impl")
        assert imported == []  # naming another engine loads nothing of the toy's
        factory, name = load_target("toy")
        assert name == "toy" and imported == ["toy_engine_kvpool:ENTRY"]
        assert choose_profile("toy").name == "vllm-0.33"
        assert factory(PoolConfig(3), get_profile("vllm-0.33")).apply is not None
    finally:
        registry.engine.cache_clear()


def test_a_manager_named_by_engine_follows_the_target() -> None:
    with pytest.raises(TargetLoadError, match="give a vLLM target"):
        load_manager("vllm", "impl")
    assert load_manager("auto", "impl")[1] == "impl"
    assert load_manager("auto", "spec") == (None, "none")
    assert load_manager("none", "impl") == (None, "none")


# --- forks --------------------------------------------------------------------------------


def _fork_of(release: Path, root: Path, package: str) -> Path:
    """vLLM 0.33.0's pool files laid out as a fork would ship them: under ``package/``,
    importing ``package.*`` (the fixture rewrites the copies; the loader renames nothing)."""
    for source in (release / "vllm").rglob("*.py"):
        target = root / package / source.relative_to(release / "vllm")
        target.parent.mkdir(parents=True, exist_ok=True)
        text = source.read_text(encoding="utf-8")
        text = re.sub(r"\bvllm\.", f"{package}.", text).replace(
            "from vllm import", f"from {package} import"
        )
        target.write_text(text.replace("VLLM_", f"{package.upper()}_"), encoding="utf-8")
    return root


@pytest.fixture
def fork_tree(tmp_path: Path) -> Path:
    from kvpool.conformance.engines.vllm.distribution import WheelError, cached_release

    try:
        release = cached_release("0.33.0")
    except WheelError as exc:
        pytest.skip(f"vLLM 0.33.0 is not cached and cannot be downloaded: {exc}")
    return _fork_of(release, tmp_path / "tree", "forkllm")


def test_a_fork_tree_is_found_by_its_own_package_and_loaded_under_it(fork_tree: Path) -> None:
    described = describe_target(f"vllm@{fork_tree}")
    assert described.package == "forkllm"
    choice = choose_profile(described)
    assert choice.name == "seed" and "forkllm/" in choice.reason and "a guess" in choice.reason
    factory, name = load_target(described)
    assert name == f"vllm@{fork_tree} (0.33.0)"
    target = factory(PoolConfig(4), get_profile("vllm-0.33"))
    assert "cache_partial_block" in target.operations
    pool_module = type(target.pool).__module__  # type: ignore[attr-defined]
    assert pool_module == "forkllm.v1.core.block_pool"
    assert not any(m == "forkllm" or m.startswith("forkllm.") for m in sys.modules)


def test_a_fork_named_with_package_must_be_there(fork_tree: Path) -> None:
    shutil.copytree(fork_tree / "forkllm", fork_tree / "otherllm")
    with pytest.raises(TargetLoadError, match=r"several packages .*--package NAME"):
        load_target(f"vllm@{fork_tree}")
    assert describe_target(f"vllm@{fork_tree}", package="otherllm").package == "otherllm"
    with pytest.raises(TargetUsageError, match=r"holds no nosuch/v1/core/block_pool\.py"):
        describe_target(f"vllm@{fork_tree}", package="nosuch")


def test_a_fork_conforms_where_vllm_does(fork_tree: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--target",
            f"vllm@{fork_tree}",
            "--profile",
            "vllm-0.33",
            "--machine",
            "pool",
            "--level",
            "safety,order",
            "--max-examples",
            "20",
            "--seed",
            "3",
            "--no-coverage",
            "--trace-dir",
            str(tmp_path / "traces"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"vllm@{fork_tree} (0.33.0)" in result.output


def test_package_on_the_command_line_picks_the_fork(fork_tree: Path, tmp_path: Path) -> None:
    from kvpool.conformance.engines.vllm.distribution import cached_release

    _fork_of(cached_release("0.33.0"), fork_tree, "otherllm")
    common = ["conform", "--target", f"vllm@{fork_tree}", "--profile", "vllm-0.33"]
    run = [*common, "--machine", "pool", "--level", "safety", "--max-examples", "5"]
    run += ["--no-coverage", "--trace-dir", str(tmp_path / "traces")]
    refused = CliRunner().invoke(main, run)
    assert refused.exit_code == 2 and "--package NAME" in refused.output, refused.output
    chosen = CliRunner().invoke(main, [*run, "--package", "otherllm"])
    assert chosen.exit_code == 0, chosen.output


def test_aphrodite_is_judged_by_the_profile_of_the_code_it_ports() -> None:
    choice = choose_profile("aphrodite==0.24.1")
    assert choice.name == "vllm-0.30"
    assert "without unpin_blocks and KVCacheBlock.pool" in choice.reason
    with pytest.raises(TargetLoadError, match="drives the KV cache manager of a Aphrodite"):
        load_manager("aphrodite", "vllm==0.33.0")
