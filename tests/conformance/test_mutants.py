"""The mutant corpus: every patch still applies, the unmutated pool passes at the corpus
settings, every mutant is killed by the nonconformance its entry names, and anything
else that ends a run (the spec, the adapter, the harness) is an error, never a kill."""

from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm_api.adapter import VllmApiTarget
from kvpool.conformance.exits import EXIT_UNDECIDED
from kvpool.conformance.machines.pool import lockstep
from kvpool.conformance.tools.mutants.corpus import MUTANTS, MUTANTS_BY_NAME, Mutant
from kvpool.conformance.tools.mutants.load import MutantError, mutant_pool_class, mutated_source
from kvpool.conformance.tools.mutants.run import clean_run, kill, shows_in
from kvpool.impl import BlockPool

#: The settings ``kvpool mutants`` runs at by default.
SEED, MAX_EXAMPLES, BUDGET = 1, 150, 60.0

#: Mutants only the prefix-cache index (or a lookup answered from it) shows: the blocks'
#: keys, the free queue and the counts stay right.
INDEX_ONLY = (
    "extra-key-left-in-index",
    "evicted-entry-left-in-index",
    "duplicate-kept-on-eviction",
    "index-kept-across-reset",
    "moved-key-left-under-source",
    "moved-extra-left-under-source",
    "entry-under-wrong-group",
    "lookup-served-from-dropped-entry",
)


def test_the_corpus_has_at_least_37_distinct_mutants_each_naming_its_kill() -> None:
    assert len(MUTANTS) >= 37
    assert len(MUTANTS_BY_NAME) == len(MUTANTS)
    assert len({(m.file, m.old, m.new) for m in MUTANTS}) == len(MUTANTS)
    assert all(m.shows.strip() for m in MUTANTS), "a mutant does not say what its kill shows"
    for name in INDEX_ONLY:
        lookup = name == "lookup-served-from-dropped-entry"
        assert MUTANTS_BY_NAME[name].shows == ("get_cached_block" if lookup else "index: key")


@pytest.mark.parametrize("name", sorted(MUTANTS_BY_NAME))
def test_each_mutant_applies_once_and_builds_a_different_pool(name: str) -> None:
    mutant = MUTANTS_BY_NAME[name]
    source = mutated_source(mutant)
    assert mutant.new in source and mutant.old != mutant.new
    pool_class = mutant_pool_class(mutant)
    assert pool_class is not BlockPool
    pool_class(num_gpu_blocks=4, enable_caching=True, hash_block_size=1)


def test_a_patch_that_no_longer_applies_is_reported() -> None:
    stale = Mutant("stale", "bug", "block_pool.py", "no such line", "x", "free count")
    with pytest.raises(MutantError, match="occurs 0 times"):
        mutated_source(stale)
    result = kill(stale, SEED, MAX_EXAMPLES, BUDGET)
    assert result.outcome == "error"
    assert "cannot be built" in result.message and "occurs 0 times" in result.message


def test_the_unmutated_pool_passes_at_the_corpus_settings() -> None:
    clean = clean_run(SEED, MAX_EXAMPLES)
    assert clean.problem is None, clean.problem


def test_a_faulty_pool_fails_the_clean_run() -> None:
    faulty = mutant_pool_class(MUTANTS_BY_NAME["touch-adds-two"])
    clean = clean_run(SEED, MAX_EXAMPLES, pool_class=faulty)
    assert clean.problem is not None and "ref_cnt" in clean.problem
    assert clean.caught_by == "pool/safety"


@pytest.mark.parametrize("name", sorted(MUTANTS_BY_NAME))
def test_each_mutant_is_killed_by_the_nonconformance_it_names(name: str) -> None:
    mutant = MUTANTS_BY_NAME[name]
    result = kill(mutant, SEED, MAX_EXAMPLES, BUDGET)
    assert result.outcome == "killed", (result.outcome, result.caught_by, result.message)
    assert shows_in(mutant.shows, result.message)
    assert result.caught_by in ("pool/safety", "pool/order", "pool/robustness")
    assert result.trace_length <= 12


def test_a_kill_by_something_else_is_a_wrong_kill() -> None:
    mutant = replace(MUTANTS_BY_NAME["touch-adds-two"], shows="free queue order")
    result = kill(mutant, SEED, MAX_EXAMPLES, BUDGET)
    assert result.outcome == "wrong kill"
    assert "ref_cnt" in result.message and not result.killed


def test_the_spec_breaking_its_invariants_is_an_error_not_a_kill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lockstep, "broken_invariants", lambda state: ["planted"])
    result = kill(MUTANTS_BY_NAME["touch-adds-two"], SEED, MAX_EXAMPLES, BUDGET)
    assert result.outcome == "error"
    assert "not a nonconformance" in result.message
    assert "the spec broke its own invariants" in result.message


def test_an_adapter_that_cannot_read_the_pool_is_an_error_not_a_kill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def view(self: VllmApiTarget) -> object:
        raise RuntimeError("planted: the adapter cannot read this pool")

    monkeypatch.setattr(VllmApiTarget, "view", view)
    result = kill(MUTANTS_BY_NAME["free-ends-swapped"], SEED, MAX_EXAMPLES, BUDGET)
    assert result.outcome == "error"
    assert "RuntimeError: planted" in result.message


def test_the_command_stops_when_the_unmutated_pool_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kvpool.impl

    faulty = mutant_pool_class(MUTANTS_BY_NAME["touch-adds-two"])
    monkeypatch.setattr(kvpool.impl, "BlockPool", faulty)
    out = CliRunner().invoke(main, ["mutants", "--only", "free-ends-swapped", "-j", "1"])
    assert out.exit_code == EXIT_UNDECIDED, out.output
    assert "the unmutated pool fails" in out.output and "ref_cnt" in out.output
    assert "Traceback" not in out.output


#: A crash-only version of each mutant the issue named (it raises ``NameError`` where the
#: real mutant breaks a rule): scored with the real mutant's ``shows``.
CRASH_ONLY = {
    "free-releases-two": (
        "                rc = blk.ref_cnt - 1\n",
        "                rc = blk.ref_cnt - undefined_name  # type: ignore[name-defined]\n",
    ),
    "lookup-served-from-dropped-entry": (
        "                blk = self._group0.get(block_hash)\n",
        "                blk = undefined_name.get(block_hash)  # type: ignore[name-defined]\n",
    ),
}


@pytest.mark.parametrize("name", sorted(CRASH_ONLY))
def test_a_crash_only_mutant_is_not_killed(name: str) -> None:
    old, new = CRASH_ONLY[name]
    real = MUTANTS_BY_NAME[name]
    crash = replace(real, name=f"crash-only-{name}", old=old, new=new)
    result = kill(crash, SEED, MAX_EXAMPLES, BUDGET)
    assert "NameError" in result.message, result
    assert not result.killed and result.outcome == "wrong kill", result


def test_a_crash_with_pythons_own_exception_shows_no_rule() -> None:
    crash = "free_blocks was refused although it is allowed: NameError: name 'ref_cnt' is"
    assert not shows_in("ref_cnt", crash)
    declared = (
        "free_blocks was refused although it is allowed: BlockPoolError: prepend_n: block 1: "
        "rule 'queue-membership': the block is already linked"
    )
    assert shows_in(MUTANTS_BY_NAME["free-releases-two"].shows, declared)
