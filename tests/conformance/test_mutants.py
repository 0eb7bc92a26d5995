"""The mutant corpus: every patch still applies, and the suite kills mutants by the check
that fits their bug (the whole corpus is scored by `kvpool mutants` in CI)."""

from __future__ import annotations

import pytest
from kvpool.conformance.mutants.corpus import MUTANTS, MUTANTS_BY_NAME
from kvpool.conformance.mutants.load import MutantError, mutant_pool_class, mutated_source
from kvpool.conformance.mutants.run import kill
from kvpool.impl import BlockPool


def test_the_corpus_has_at_least_25_distinct_mutants() -> None:
    assert len(MUTANTS) >= 25
    assert len(MUTANTS_BY_NAME) == len(MUTANTS)
    assert len({(m.file, m.old, m.new) for m in MUTANTS}) == len(MUTANTS)


@pytest.mark.parametrize("name", sorted(MUTANTS_BY_NAME))
def test_each_mutant_applies_once_and_builds_a_different_pool(name: str) -> None:
    mutant = MUTANTS_BY_NAME[name]
    source = mutated_source(mutant)
    assert mutant.new in source and mutant.old != mutant.new
    pool_class = mutant_pool_class(mutant)
    assert pool_class is not BlockPool
    pool_class(num_gpu_blocks=4, enable_caching=True, hash_block_size=1)


def test_a_patch_that_no_longer_applies_is_reported() -> None:
    stale = MUTANTS[0].__class__("stale", "bug", "block_pool.py", "no such line", "x")
    with pytest.raises(MutantError, match="occurs 0 times"):
        mutated_source(stale)


@pytest.mark.parametrize(
    ("name", "run", "says"),
    [
        ("free-ends-swapped", "pool/order", "free queue order"),
        ("stale-key-on-reuse", "pool/safety", "keys expected"),
        ("watcher-never-fires", "pool/safety", "reuse watchers fired"),
        ("double-free-accepted", "pool/robustness", "rule 'free-held'"),
        ("remove-keeps-back-link", "pool/safety", "free list corrupted"),
    ],
)
def test_mutants_are_killed_by_the_check_that_fits(name: str, run: str, says: str) -> None:
    result = kill(name, seed=1, max_examples=150, budget_seconds=60)
    assert result.killed, name
    assert result.caught_by == run
    assert says in result.message
    assert 1 <= result.trace_length <= 8
