"""``keys-shared`` (requests that agree in every attribute share blocks: the positive
control that keeps ``keys-partitioned`` meaningful) is evaluated on every engine manager
that shares blocks, and a planted manager that never shares fails it, per engine kind.

nano-vllm and LMDeploy key a block when they schedule it: for them a block counts as left
by the request it was keyed for, from that moment (not from its write), so the request
after it, agreeing in every attribute, must hit it. Each plant turns the engine's own
lookup blind (nano-vllm's hash index answers "no such hash", LMDeploy's trie match finds
nothing): the engine still runs, it only never shares, and the run must say so by
``keys-shared`` and by nothing else first. SGLang runs at the engine machine only, which
does not evaluate ``keys-shared``: no control of it here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from engine_managers import first_difference  # (this folder is on sys.path)
from kvpool.conformance.machines.requests.target import RequestSetup
from kvpool.conformance.targets.loading import load_manager
from kvpool.spec import PoolConfig, Profile
from kvpool.spec.manager import Admit, Compute, Finish, ManagerConfig


class _Forgetful(dict[Any, Any]):
    """nano-vllm's ``hash_to_block_id`` that never finds a hash (it still records them)."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default


def _blind_nanovllm(target: Any) -> None:
    target.manager.hash_to_block_id = _Forgetful(target.manager.hash_to_block_id)


def _blind_lmdeploy(target: Any) -> None:
    target.trie.match = lambda seq: None


@dataclass(frozen=True)
class Engine:
    target: str
    needs: tuple[str, ...]
    setup: RequestSetup
    #: A prompt that is not block aligned (a fully cached aligned prompt breaks
    #: ``computes-last-token`` on nano-vllm first: a finding of its own).
    tokens: tuple[int, ...]
    blind: Callable[[Any], None]


ENGINES = {
    "nanovllm": Engine(
        "nanovllm",
        ("xxhash", "numpy"),
        RequestSetup(ManagerConfig(2), PoolConfig(6, True, 1)),
        (1, 2, 3, 4, 5),
        _blind_nanovllm,
    ),
    "lmdeploy-0.18.0": Engine(
        "lmdeploy==0.18.0",
        ("numpy",),
        RequestSetup(ManagerConfig(2), PoolConfig(9, True, 2)),
        (1, 2, 3, 4, 5),
        _blind_lmdeploy,
    ),
    "lmdeploy-0.16.0": Engine(
        "lmdeploy==0.16.0",
        ("numpy",),
        RequestSetup(ManagerConfig(2), PoolConfig(9, True, 2)),
        (1, 2, 3, 4, 5),
        _blind_lmdeploy,
    ),
}


class Planted:
    """``factory`` with ``plant`` applied to every manager it builds."""

    def __init__(self, factory: Any, plant: Callable[[Any], None]) -> None:
        self.factory = factory
        self.plant = plant

    def __getattr__(self, name: str) -> Any:
        return getattr(self.factory, name)

    def __call__(self, setup: RequestSetup, profile: Profile) -> Any:
        target = self.factory(setup, profile)
        self.plant(target)
        return target


def _engine(name: str) -> tuple[Engine, Any]:
    engine = ENGINES[name]
    for module in engine.needs:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{engine.target} needs {module}: pip install -e '.[all]'")
    factory, _ = load_manager(engine.target, engine.target)
    return engine, factory


def _served_then_again(engine: Engine) -> list[object]:
    """A request served and finished, then one agreeing with it in every attribute."""
    return [
        Admit("a", engine.tokens, None),
        Compute("a"),
        Finish("a"),
        Admit("b", engine.tokens, None),
    ]


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_keys_shared_is_evaluated_and_holds(name: str) -> None:
    engine, factory = _engine(name)
    from kvpool.conformance.machines.pool.lockstep import RunRecord
    from kvpool.conformance.machines.requests.property_run import PropertyRun
    from kvpool.spec import SEED

    run = PropertyRun(factory, SEED, engine.setup, RunRecord())
    for action in _served_then_again(engine):
        run.apply(action)  # type: ignore[arg-type]
    assert run.record.properties["keys-shared"] >= 2, run.record.properties


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_a_manager_that_never_shares_fails_keys_shared(name: str) -> None:
    engine, factory = _engine(name)
    found = first_difference(
        Planted(factory, engine.blind), engine.setup, *_served_then_again(engine)
    )
    assert found is not None and found.startswith("property 'keys-shared' broken"), found
    assert "request 'b'" in found
