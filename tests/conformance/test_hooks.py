"""Hooks are declared once (``kvpool.conformance.hooks``) and a target is checked against
them when it is loaded: a misspelt hook, or one of another signature or kind, is a usage
error (exit 2) naming it, never silently ignored."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from kvpool.conformance.cli import main
from kvpool.conformance.hooks import (
    hook_problems,
    manager_factory_problems,
    manager_target_problems,
    pool_target_problems,
)
from kvpool.conformance.machines.requests.capabilities import Capabilities, declared_by
from kvpool.conformance.usage import EXIT_USAGE

MODULE = textwrap.dedent(
    """
    from kvpool.conformance.engines.builtin.entries import impl_manager, impl_target
    from kvpool.conformance.engines.builtin.impl_manager import ManagerApiTarget


    class MisspeltManager(ManagerApiTarget):
        swap_in_cached = True  # meant: swaps_in_cached


    def misspelt_manager(setup, profile):
        built = impl_manager(setup, profile)
        built.swap_in_cached = True
        return built


    def keyed_without_request(setup, profile):
        built = impl_manager(setup, profile)
        built.keyed_tokens = lambda: 0  # the suite calls keyed_tokens(request_id)
        return built


    class Versioned:
        def __init__(self, inner):
            self._inner = inner
            self.name, self.operations = inner.name, inner.operations
            self.observes = inner.observes
            self.apply, self.view = inner.apply, inner.view
            self.structure_problems = inner.structure_problems


    def pool_with_version_number(config, profile):
        target = Versioned(impl_target(config, profile))
        target.version = 33  # a number: traces and tables read a str
        return target


    def pool_with_misspelt_takes(config, profile):
        target = Versioned(impl_target(config, profile))
        target.take = lambda action: True  # meant: takes
        return target
    """
)


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hooked_targets.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))


def conform(*args: str) -> Result:
    return CliRunner().invoke(main, ["conform", "--max-examples", "5", *args])


@pytest.mark.usefixtures("plugins")
@pytest.mark.parametrize("factory", ["MisspeltManager", "misspelt_manager"])
def test_a_manager_with_a_misspelt_hook_is_refused_naming_it(factory: str) -> None:
    result = conform("--machine", "requests", "--manager", f"hooked_targets:{factory}")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "'swap_in_cached', which is no hook: did you mean 'swaps_in_cached'?" in result.output
    assert "Traceback" not in result.output


@pytest.mark.usefixtures("plugins")
def test_a_manager_hook_of_another_signature_is_refused_naming_it() -> None:
    result = conform("--machine", "requests", "--manager", "hooked_targets:keyed_without_request")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "hook keyed_tokens: its signature is keyed_tokens()" in result.output
    assert "the suite calls keyed_tokens(request_id)" in result.output


@pytest.mark.usefixtures("plugins")
@pytest.mark.parametrize(
    ("factory", "named"),
    [
        ("pool_with_version_number", "hook version: it is a int, but the suite reads a str"),
        ("pool_with_misspelt_takes", "'take', which is no hook: did you mean 'takes'?"),
    ],
)
def test_a_pool_target_with_a_wrong_hook_is_refused_naming_it(factory: str, named: str) -> None:
    result = conform("--machine", "pool", "--target", f"hooked_targets:{factory}")
    assert result.exit_code == EXIT_USAGE, result.output
    assert named in " ".join(result.output.split()), result.output


def test_the_built_in_impl_manager_and_pool_pass_the_hook_check() -> None:
    from kvpool.conformance.engines.builtin.entries import impl_manager, impl_target
    from kvpool.conformance.machines.requests.target import RequestSetup
    from kvpool.spec import PoolConfig, get_profile
    from kvpool.spec.manager import ManagerConfig

    seed = get_profile("seed")
    assert manager_factory_problems(impl_manager) == []
    built = impl_manager(RequestSetup(ManagerConfig(1), PoolConfig(4)), seed)
    assert manager_target_problems(built) == []
    assert pool_target_problems(impl_target(PoolConfig(4), seed)) == []


class Declared:
    """Declares its hooks: a name close to a hook is then its own business."""

    hooks = frozenset({"swaps_in_cached"})
    swaps_in_cached = True
    swap_in_cache = "a field of its own"


class DeclaresAnUnknownHook:
    hooks = frozenset({"swap_in_cached"})


def test_declared_hooks_replace_the_near_miss_rule_and_must_be_hooks() -> None:
    from kvpool.conformance.hooks import MANAGER_TARGET

    assert hook_problems(Declared(), MANAGER_TARGET, frozenset(), "it") == []
    problems = hook_problems(DeclaresAnUnknownHook(), MANAGER_TARGET, frozenset(), "it")
    assert problems and "declares the hook 'swap_in_cached', which is no hook" in problems[0]


def test_the_property_checker_reads_declared_capabilities_in_one_place() -> None:
    class Sharded:
        swaps_in_cached = True
        resets_only_without_requests = True

        def keyed_tokens(self, request_id: str) -> int:
            return 4

    declared = declared_by(Sharded())
    assert declared.swaps_in_cached and declared.resets_only_without_requests
    assert not declared.registers_when_scheduled
    assert declared.keyed_tokens is not None and declared.keyed_tokens("r") == 4
    assert declared_by(object()) == Capabilities()


def test_the_property_checker_names_no_engine() -> None:
    from kvpool.conformance.machines.requests import checks

    source = Path(checks.__file__).read_text(encoding="utf-8").lower()
    engines = ("vllm", "sglang", "lmdeploy", "nano", "mlx", "aphrodite", "dynamo", "tensorrt")
    assert [e for e in engines if e in source] == []


def test_a_refused_flush_passes_only_while_a_declared_manager_still_knows_a_request() -> None:
    """``resets_only_without_requests``: a flush refused while a preempted request still
    waits (holding no block) passes ``idle-pool-free``; without the declaration, or once
    no request is known, the refusal breaks it."""
    from collections import Counter
    from dataclasses import replace

    from kvpool.conformance.machines.pool.target import PoolView
    from kvpool.conformance.machines.requests.checks import PropertyBroken, RequestChecks, Tracked
    from kvpool.conformance.machines.requests.target import RequestSetup
    from kvpool.spec import PoolConfig
    from kvpool.spec.manager import ManagerConfig

    setup = RequestSetup(ManagerConfig(2), PoolConfig(5, True, 2))
    idle = PoolView(free_count=4)
    checks = RequestChecks(setup, Counter())
    checks.declared = replace(checks.declared, resets_only_without_requests=True)
    checks.requests["a"] = Tracked((1, 2), None)  # preempted: known, holds nothing
    checks.step_done(idle, reset_result=False)
    checks.declared = replace(checks.declared, resets_only_without_requests=False)
    with pytest.raises(PropertyBroken, match="reset_prefix_cache refused"):
        checks.step_done(idle, reset_result=False)
    checks.declared = replace(checks.declared, resets_only_without_requests=True)
    del checks.requests["a"]
    with pytest.raises(PropertyBroken, match="reset_prefix_cache refused"):
        checks.step_done(idle, reset_result=False)


def test_an_engine_factory_s_block_size_is_checked() -> None:
    """The engine machine reads ``block_size`` off a driver's factory: a misspelt one or one
    of another type is named, a right one passes."""
    from kvpool.conformance.hooks import engine_factory_problems

    class Factory:
        def __init__(self, **declared: object) -> None:
            self.__dict__.update(declared)

    assert engine_factory_problems(Factory(block_size=4)) == []
    (misspelt,) = engine_factory_problems(Factory(block_sise=4))
    assert "'block_sise', which is no hook: did you mean 'block_size'?" in misspelt
    (typed,) = engine_factory_problems(Factory(block_size="4"))
    assert "hook block_size" in typed
