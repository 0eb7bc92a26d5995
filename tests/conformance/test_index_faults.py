"""The pool machine alone catches every fault of the prefix-cache index, on every seed.

Four faults (``index_faults``): a duplicate kept in the index when its block is evicted, the
index kept across a reset, a lookup answering with a block whose key is gone, extra keys
left in the index. Each is planted in our pool and in a copy of vLLM 0.33.0's tree, and
each of those is also run with its index hidden from the adapter (probed through its
lookups). The command they stand for is ``kvpool conform --machine pool --level
safety,order`` at its default examples, steps and blocks; it must fail on seeds 1 to 5,
with a message naming the index or a lookup. The same pools without a fault pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from index_faults import FAULTS, HiddenIndex, planted_vllm_tree  # on sys.path via pytest
from kvpool.conformance.engines.vllm.distribution import cached_release
from kvpool.conformance.engines.vllm.entry import load_vllm
from kvpool.conformance.engines.vllm_api.adapter import VllmApiTarget
from kvpool.conformance.machines.pool.levels import ORDER, SAFETY
from kvpool.conformance.machines.pool.runner import LevelResult, run_level
from kvpool.conformance.machines.pool.target import Target
from kvpool.conformance.targets.loading import choose_profile, described
from kvpool.impl import BlockPool
from kvpool.spec import PoolConfig, Profile
from kvpool.spec.profile import SEED, get_profile

SEEDS = (1, 2, 3, 4, 5)
#: ``kvpool conform``'s defaults.
DEFAULTS = {"max_examples": 150, "steps": 40, "max_blocks": 8}
WHERE = ("ours", "ours, index hidden", "vllm 0.33.0", "vllm 0.33.0, index hidden")

Factory = Callable[[PoolConfig, Profile], Target]


def _vllm_tree(tmp: Path, edit: tuple[str, str] | None) -> tuple[Factory, Factory, Profile]:
    """A copy of vLLM 0.33.0's cached tree (with ``edit`` made, if any), loaded as
    ``vllm@PATH``: its target factory, the same pool with its index hidden, its profile."""
    release = cached_release("0.33.0")
    tree = planted_vllm_tree(release, tmp, edit)
    spec = f"vllm@{tree}"
    loaded = load_vllm(described(spec))
    api = loaded.api()
    hidden = functools.partial(HiddenIndex, loaded.pool_class)

    def hidden_target(config: PoolConfig, profile: Profile) -> Target:
        return VllmApiTarget(hidden, config, profile, name=f"{spec} (index hidden)", api=api)

    profile = get_profile(choose_profile(spec).name)
    return loaded.target_factory(spec), hidden_target, profile


def _ours(pool_class: type[BlockPool], hide: bool) -> Factory:
    factory = functools.partial(HiddenIndex, pool_class) if hide else pool_class

    def target(config: PoolConfig, profile: Profile) -> Target:
        return VllmApiTarget(factory, config, profile, name=pool_class.__name__)

    return target


def _target(where: str, pool_class: type[BlockPool], edit: tuple[str, str] | None, tmp: Path):
    if where.startswith("ours"):
        return _ours(pool_class, "hidden" in where), SEED
    shown, hidden, profile = _vllm_tree(tmp, edit)
    return (hidden if "hidden" in where else shown), profile


def pool_machine(factory: Factory, profile: Profile, seed: int) -> Iterator[LevelResult]:
    """``--machine pool --level safety,order``: each level in turn until one fails."""
    for level in (SAFETY, ORDER):
        result = run_level(
            factory, profile, level, seed=seed, max_findings=1, shrink_seconds=0.5, **DEFAULTS
        )
        yield result
        if not result.passed:
            return


def _names_the_index(message: str, hidden: bool) -> bool:
    """Whether ``message`` reports the index or a lookup (not only, say, a block's keys).

    With the index hidden, a stale entry behind a live one under the same key is out of a
    lookup's sight (a lookup returns the first block only); it shows when the pool then
    refuses to cache that block under the key again, as a block missing its key.
    """
    shown = ("index: key", "lookup: get_cached_block", "get_cached_block:")
    return any(part in message for part in shown) or (hidden and ": keys expected" in message)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_index_fault_is_caught_on_every_seed(fault: str, where: str, tmp_path: Path) -> None:
    pool_class, edit = FAULTS[fault]
    factory, profile = _target(where, pool_class, edit, tmp_path)
    seconds = {}
    for seed in SEEDS:
        results = list(pool_machine(factory, profile, seed))
        failed = [r for r in results if not r.passed]
        assert failed, f"{fault} ({where}) passed the pool machine on seed {seed}"
        failure = failed[0].failure
        assert failure is not None
        assert _names_the_index(failure.message, "hidden" in where), (
            f"{fault} ({where}), seed {seed}: caught, but not by the index or a lookup: "
            f"{failure.message}"
        )
        assert "map-matches-block-keys" in failure.message or "hidden" in where
        seconds[seed] = round(sum(r.seconds for r in results), 2)
    print(f"{fault} ({where}): seconds to catch by seed {seconds}")


@pytest.mark.parametrize("where", WHERE)
def test_the_pools_without_a_fault_pass(where: str, tmp_path: Path) -> None:
    factory, profile = _target(where, BlockPool, None, tmp_path)
    for result in pool_machine(factory, profile, seed=SEEDS[0]):
        assert result.passed, f"{where}: {result.failure}"
        assert result.record.operations["get_cached_block"] > 0


def test_a_hidden_index_is_probed_and_a_readable_one_read(tmp_path: Path) -> None:
    shown = _ours(BlockPool, hide=False)(PoolConfig(4), SEED)
    hidden = _ours(BlockPool, hide=True)(PoolConfig(4), SEED)
    assert "index" in shown.observes and "index" in hidden.observes
    assert shown.view().index == () and hidden.view().index is None
