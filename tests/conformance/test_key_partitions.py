"""Key partitioning: which attributes each vLLM release's block hashes carry (measured
again here on its own hashing, and compared with its profile), our manager's hashing
against the seed profile, and the planted faults each caught by the property they break.

The planted faults of our manager are judged by the properties alone: a hasher that leaves
an attribute out is run with its keys hidden (``keys-partitioned`` needs none), one that
never shares with its keys read in the spec's hashes (``keys-shared``). Each is caught at
``kvpool conform --machine requests``'s default examples, steps and blocks on the first
of seeds 1, 2, 3 that catches it, or, with ``KVPOOL_KEY_FAULT_SEEDS=1,2,3,4,5``, on every
one of those seeds (the campaign whose spread the docs record).
"""

from __future__ import annotations

import os
from typing import Any

import faulty_managers as fm  # on sys.path via pytest
import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm.distribution import cached_release
from kvpool.conformance.engines.vllm.isolation import load_release
from kvpool.conformance.engines.vllm.key_partitions import PAIRS, TOKENS, measure_key_attributes
from kvpool.conformance.engines.vllm.manager_target import extra_keys_taken
from kvpool.conformance.machines.pool.levels import REQUEST_MIN_BLOCKS
from kvpool.conformance.machines.requests.runner import ON_MANAGER, manager_builder, run_requests
from kvpool.conformance.trace.itf import decode, encode
from kvpool.conformance.trace.model import AnyAction
from kvpool.impl import KVCacheManager
from kvpool.spec.manager import ALL_ATTRIBUTES, Admit, ExtraKeys, LoraAdapter, MultiModalFeature
from kvpool.spec.profile import SEED, profile_for_version

CAMPAIGN = os.environ.get("KVPOOL_KEY_FAULT_SEEDS")
SEEDS = tuple(int(s) for s in (CAMPAIGN or "1,2,3").split(","))
DEFAULTS = {"max_examples": 150, "steps": 40, "max_blocks": REQUEST_MIN_BLOCKS}

#: One release per change of the measured attributes, and the releases --manager vllm
#: findings cover.
RELEASES = ("0.10.2", "0.11.0", "0.12.0", "0.18.0", "0.19.0", "0.24.0", "0.30.0", "0.31.0",
            "0.33.0")  # fmt: skip


@pytest.mark.parametrize("version", RELEASES)
def test_each_release_hashes_exactly_the_attributes_its_profile_lists(version: str) -> None:
    release = load_release(cached_release(version), version)
    measured = measure_key_attributes(release.modules)
    assert measured == profile_for_version(version).key_attributes
    # prompt embeddings are drawn for a release's requests only where it hashes them
    assert ("prompt-embeds" in extra_keys_taken(release.modules)) == ("prompt-embeds" in measured)


def test_our_manager_hashes_every_attribute_as_the_seed_profile_says() -> None:
    found = set()
    for attribute, ((salt_a, a), (salt_b, b)) in PAIRS.items():
        hashes = []
        for rid, salt, extra in (("a", salt_a, a), ("b", salt_b, b)):
            m = KVCacheManager(num_gpu_blocks=8, block_size=4)
            lora = None if extra.lora is None else (extra.lora.name, extra.lora.path)
            features = [(f.identifier, f.offset, f.length) for f in extra.mm]
            m.admit(rid, TOKENS, salt, lora=lora, mm_features=features, prompt_embeds=extra.embeds)
            hashes.append(m.requests[rid].request.block_hashes)
        if hashes[0] != hashes[1]:
            found.add(attribute)
    assert found == SEED.key_attributes == ALL_ATTRIBUTES


def _caught(factory: Any, wanted: str) -> None:
    missed, other = [], []
    for seed in SEEDS:
        result = run_requests(
            manager_builder(factory, SEED), ON_MANAGER, seed=seed, max_findings=1,
            shrink_seconds=1.0, **DEFAULTS,
        )  # fmt: skip
        if result.failure is None:
            missed.append(seed)
            continue
        if f"property '{wanted}'" not in result.failure.message:
            other.append((seed, result.failure.message[:200]))
            continue
        if not CAMPAIGN:
            return
    assert not CAMPAIGN or not (missed or other), (missed, other)
    assert len(missed) + len(other) < len(SEEDS), (missed, other)


@pytest.mark.parametrize(
    "fault", ["SaltIgnored", "LoraIgnored", "ImageOffsetIgnored", "EmbedsIgnored"]
)
def test_a_hasher_leaving_an_attribute_out_is_caught_by_keys_partitioned(fault: str) -> None:
    _caught(fm.hidden(getattr(fm, fault)), "keys-partitioned")


def test_a_manager_that_never_shares_is_caught_by_keys_shared() -> None:
    _caught(fm.paired(fm.NeverShares), "keys-shared")


@pytest.mark.parametrize("wrap", [fm.hidden, fm.paired])
def test_our_manager_passes_with_its_keys_hidden_or_paired(wrap: Any) -> None:
    result = run_requests(
        manager_builder(wrap(KVCacheManager), SEED), ON_MANAGER, max_examples=40, steps=30,
        seed=2, max_blocks=REQUEST_MIN_BLOCKS,
    )  # fmt: skip
    assert result.failure is None, result.failure
    properties = result.record.properties
    assert properties["keys-partitioned"] > 0
    assert (properties["keys-shared"] > 0) == (wrap is fm.paired)  # needs the keys shown


def test_an_admission_with_attributes_traces_and_reads_back() -> None:
    plain = Admit("r1", (1, 2), "s")
    assert "extra" not in encode(plain, AnyAction)  # older traces keep their bytes
    full = Admit(
        "r2", (1, 2, 3), None,
        ExtraKeys(LoraAdapter("sql", "/a"), (MultiModalFeature("img", 1, 2),), (4, 5, 6)),
    )  # fmt: skip
    for action in (plain, full):
        assert decode(encode(action, AnyAction), AnyAction) == action


def test_rules_lists_both_properties() -> None:
    result = CliRunner().invoke(main, ["rules"])
    assert result.exit_code == 0, result.output
    assert "keys-partitioned" in result.output and "keys-shared" in result.output
    assert "request-extra-keys" in result.output


def test_the_spec_manager_keeps_the_attributes_apart_on_our_pool() -> None:
    """The spec's manager, drawn every attribute, over our pool: it passes, and the
    properties judge real hits of requests with attributes."""
    from kvpool.conformance.machines.requests.pool_run import PoolRequestRun
    from kvpool.conformance.machines.requests.runner import ON_POOL
    from kvpool.conformance.targets.loading import load_target

    factory, _ = load_target("impl")

    def build(setup: Any, record: Any) -> PoolRequestRun:
        run = PoolRequestRun(factory, SEED, setup, record)
        run.extra_keys_taken = ALL_ATTRIBUTES
        return run

    result = run_requests(
        build, ON_POOL, max_examples=80, steps=40, seed=1, max_blocks=REQUEST_MIN_BLOCKS
    )
    assert result.failure is None, result.failure
    assert result.record.properties["keys-partitioned"] > 0
    assert result.record.situations["hit with a LoRA adapter, image or embeddings"] > 0
    # the positive control runs on the pool too: the pool's lookups must serve the prefix
    # the cache holds under the request's own keys to the spec's manager
    assert result.record.properties["keys-shared"] > 0
