"""The README's counts and quoted figures agree with the code and the records: the
request-level properties it lists, the mutants and proof obligations it counts, the
mutants record it sums up and the growth of a prefix-hit call it quotes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kvpool.conformance.tools.mutants.corpus import MUTANTS
from kvpool.conformance.tools.reference.bench_record import BenchRecord, span
from kvpool.conformance.tools.reference.bench_record import load as load_managers
from kvpool.conformance.tools.reference.mutants_record import load as load_mutants
from kvpool.conformance.tools.reference.pool_record import PoolRecord, pools_table
from kvpool.conformance.tools.reference.pool_record import load as load_pools
from kvpool.spec.manager.properties import PROPERTIES

ROOT = Path(__file__).resolve().parents[2]
README = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())


def listed_properties(text: str) -> set[str]:
    """The properties the README's request-level paragraph names in backticks."""
    start = text.index("After every step the named properties are checked")
    end = text.index("The output's properties table", start)
    return set(re.findall(r"`([a-z-]+)`", text[start:end]))


def test_the_readme_lists_every_request_property() -> None:
    assert listed_properties(README) == set(PROPERTIES)


def test_a_missing_property_would_be_caught() -> None:
    planted = README.replace(
        " and `keys-shared` (its positive control", " and (its positive control"
    )
    assert planted != README
    assert listed_properties(planted) != set(PROPERTIES)


def test_the_readme_counts_the_mutants() -> None:
    assert f"against {len(MUTANTS)} named bugs planted in kvpool.impl" in README


def test_the_readme_counts_the_proof_obligations() -> None:
    pytest.importorskip("z3")
    from kvpool.conformance.tools.proofs.obligations import all_obligations

    assert f"Z3: {len(all_obligations())} obligations for any number of blocks" in README


def test_the_readme_says_what_the_mutants_record_shows() -> None:
    record = load_mutants(ROOT / "docs")
    seeds = ", ".join(str(r.seed) for r in record.runs[:-1]) + f" and {record.runs[-1].seed}"
    everything = all(r.killed == r.mutants for r in record.runs)
    said = f"`kvpool mutants` kills every planted bug on seeds {seeds}"
    assert (said in README) == everything, f"README.md and docs/data/mutants.json disagree: {said}"


def growth_sentence(record: PoolRecord) -> str:
    """The README's sentence on a prefix-hit call's growth, from the record."""
    (hits,) = [g for g in record.growth if g.workload == "prefix-hit"]
    more = sum(o > v for o, v in zip(hits.ours_added_us, hits.vllm_added_us, strict=True))
    verb = "does suffer more" if more == len(hits.ours) else "does not always suffer more"
    return (
        f"Ours {verb} from memory than vLLM's: in each of the record's three runs, from 1k to "
        f"1M blocks a prefix-hit call of ours took {span(hits.ours_added_us, 2)} µs more and "
        f"vLLM's {span(hits.vllm_added_us, 2)} µs more (per call {span(hits.ours, 2)} times "
        f"the 1k cost against {span(hits.vllm, 2)})"
    )


def test_the_readme_quotes_the_growth_the_pools_record_shows() -> None:
    expected = growth_sentence(load_pools(ROOT / "docs"))
    assert expected in README, f"README.md should say: {expected}"


def test_a_record_where_ours_grows_less_would_change_the_sentence() -> None:
    record = load_pools(ROOT / "docs")
    (hits,) = [g for g in record.growth if g.workload == "prefix-hit"]
    swapped = hits.__class__(
        hits.workload,
        hits.smallest,
        hits.largest,
        hits.vllm,
        hits.ours,
        hits.vllm_added_us,
        hits.ours_added_us,
    )
    planted = record.__class__(
        record.command,
        record.commit,
        record.date,
        record.machine,
        record.runs,
        record.cells,
        record.memory,
        (swapped,),
    )
    assert growth_sentence(planted) not in README


def managers_sentence(record: BenchRecord) -> str:
    """The README's sentence of the managers' ratios, from the record."""
    by = {(f.workload, f.num_gpu_blocks): f for f in record.figures}
    cells = [("requests", 1000), ("requests", 100_000), ("long prompts", 100_000)]

    def three(suffix: str, field: str, bold: bool = False) -> list[str]:
        spans = [span(getattr(by[(w + suffix, n)], field), 2) for w, n in cells]
        return [f"**{s}**" for s in spans] if bold else spans

    def listed(spans: list[str]) -> str:
        return f"{spans[0]}, {spans[1]} and {spans[2]}"

    ratio = three("", "ratio", bold=True)
    canonical = three(", ours on the spec's hashing", "ratio")
    return (
        f"{ratio[0]} at 1k blocks, {ratio[1]} at 100k, {ratio[2]} on long prompts "
        f"(8k\N{EN DASH}128k tokens, 100k blocks); each side's fastest repetition "
        f"{listed(three('', 'fastest'))}; prehashed {listed(three(', prehashed', 'ratio'))}; "
        "ours on the spec's canonical hashing (its default) "
        f"{listed(canonical)}."
    )


def pools_quotes(record: PoolRecord) -> list[str]:
    """What the README quotes of the pools record: the ratio rows and the memory line."""
    ratios = pools_table(record).split("\n\n")[1]
    quotes = [" ".join(row.split()) for row in ratios.strip().split("\n")[2:]]
    memory = {m.num_gpu_blocks: m for m in record.memory}
    sides = [
        " / ".join(span(getattr(memory[n], side), 0) for n in (1000, 100_000, 1_000_000))
        for side in ("ours", "compiled", "vllm")
    ]
    quotes.append(
        f"Memory per block: ours {sides[0]} bytes at 1k / 100k / 1M, compiled {sides[1]}, "
        f"vLLM's {sides[2]}."
    )
    return quotes


def missing(readme: str) -> list[str]:
    """Each figure the records give that ``readme`` does not quote as they give it."""
    quotes = [managers_sentence(load_managers(ROOT / "docs"))]
    quotes += pools_quotes(load_pools(ROOT / "docs"))
    return [quote for quote in quotes if quote not in readme]


def test_the_readme_quotes_the_managers_and_pools_records() -> None:
    assert missing(README) == []


@pytest.mark.parametrize(
    ("figure", "typo"),
    [("**1.51\N{EN DASH}1.55** at 100k", "**1.51\N{EN DASH}1.56** at 100k"), ("235", "234")],
)
def test_a_figure_typed_otherwise_than_its_record_is_caught(figure: str, typo: str) -> None:
    assert figure in README
    assert len(missing(README.replace(figure, typo, 1))) == 1
