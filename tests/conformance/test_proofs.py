"""``kvpool prove``: every obligation proved over an unbounded number of blocks, and each
shown able to fail: its faulty variant refuted with a model, its premises satisfiable."""

from __future__ import annotations

import pytest
from kvpool.conformance.tools.proofs.actions import FAULTS
from kvpool.conformance.tools.proofs.obligations import Obligation, all_obligations
from kvpool.conformance.tools.proofs.prover import PROVED, REFUTED, premises_satisfiable, prove

OBLIGATIONS = all_obligations()


def by_name(name: str) -> Obligation:
    (ob,) = (o for o in OBLIGATIONS if o.name == name)
    return ob


@pytest.mark.parametrize("name", [o.name for o in OBLIGATIONS])
def test_obligation_is_proved(name: str) -> None:
    result = prove(by_name(name), timeout=20)
    assert result.status == PROVED, (result.status, result.reason, result.model)


@pytest.mark.parametrize("name", [o.name for o in OBLIGATIONS])
def test_faulty_variant_is_refuted_with_a_model(name: str) -> None:
    ob = by_name(name)
    result = prove(ob, timeout=20, fault=ob.fault)
    assert result.status == REFUTED, result
    if ob.kind in ("inductive", "property", "lemma use"):
        assert any("block" in line for line in result.model), result.model


@pytest.mark.parametrize("name", [o.name for o in OBLIGATIONS])
def test_premises_are_satisfiable(name: str) -> None:
    assert premises_satisfiable(by_name(name)) == "sat"


def test_every_fault_is_used_and_every_obligation_names_a_known_fault() -> None:
    from kvpool.conformance.tools.proofs.bmc import BMC_FAULTS

    used = {o.fault for o in OBLIGATIONS} | set(BMC_FAULTS)
    assert used == set(FAULTS)


def test_the_obligations_cover_every_pool_action() -> None:
    names = {o.name for o in OBLIGATIONS}
    for action in (
        "get_new_blocks",
        "free_blocks",
        "touch",
        "unpin_blocks",
        "cache_full_blocks",
        "cache_partial_block",
        "evict_blocks",
        "move_block_hashes",
        "reset_prefix_cache",
    ):
        assert f"preserves:{action}" in names


def test_a_refutation_is_not_an_instantiation_artefact_for_a_sound_action() -> None:
    # a correct action with the witness left out of the assumed invariant is not provable:
    # the instantiation at the witness is what carries the proof
    import z3
    from kvpool.conformance.tools.proofs import actions, encoding
    from kvpool.conformance.tools.proofs.obligations import Query
    from kvpool.conformance.tools.proofs.prover import check_query

    s = encoding.fresh_state("s")
    b, k = z3.Ints("b k")
    c = z3.Array("c", z3.IntSort(), z3.IntSort())
    step = actions.touch(s, lambda x: c[x])
    query = Query([step.pre, step.pre_at(b, k)], encoding.invariant_at(step.post, b, k))
    assert check_query(query, 10)[0] == REFUTED


@pytest.mark.parametrize("name", ["preserves:touch", "preserves:free_blocks"])
def test_quantified_cross_check_proves_the_correct_action(name: str) -> None:
    result = prove(by_name(name), timeout=20, quantified=True)
    assert result.status == PROVED, result


def test_ref_count_equals_holders_is_proved_by_a_lemma_and_per_action_obligations() -> None:
    refs = {o.name: o for o in OBLIGATIONS if o.name.startswith("refs-holders:")}
    assert refs["refs-holders:lemma-base"].kind == "lemma base"
    assert refs["refs-holders:lemma-step"].kind == "lemma step"
    for action in ("append-new", "touch-hits", "free-tail", "cow-swap", "slide-null"):
        assert refs[f"refs-holders:{action}"].kind == "lemma use"
    assert len({o.fault for o in refs.values()}) == len(refs)  # each its own fault


@pytest.mark.parametrize("action", ["append-new", "cow-swap"])
def test_ref_holders_needs_the_invariant_before(action: str) -> None:
    # without ref == holders before the action, the obligation is not provable: the
    # premise is what carries it
    from kvpool.conformance.tools.proofs import holders
    from kvpool.conformance.tools.proofs.obligations import Query
    from kvpool.conformance.tools.proofs.prover import check_query

    premises, goal, pre, post, blocks, keys, _ = holders.action_query(action, None, False)
    assert check_query(Query(premises, goal, pre, post, blocks, keys), 10)[0] == REFUTED


def test_the_report_says_how_ref_count_equals_holders_is_handled() -> None:
    from kvpool.conformance.tools.proofs.command import COUNTING_NOTE

    assert "NOT encoded" not in COUNTING_NOTE
    assert "concat-count lemma" in COUNTING_NOTE and "refs-holders" in COUNTING_NOTE
