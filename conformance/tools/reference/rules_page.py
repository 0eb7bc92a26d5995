"""``reference/rules.md``: every rule of the caller's contract, by the id errors quote, with
the operations (or request actions) whose check can name it."""

from __future__ import annotations

from kvpool.spec.rules import REQUEST_RULES, RULES

from .action_facts import PoolActionFacts, RequestActionFacts
from .markdown import GENERATED, code, prose, sentence


def _checked_by(rule: str, pool: list[PoolActionFacts], requests: list[RequestActionFacts]) -> str:
    links = [f"[{code(f.operation)}](actions/{f.operation}.md)" for f in pool if rule in f.rules]
    links += [
        f"[{code(f.operation)}](request-actions.md#{f.operation})"
        for f in requests
        if rule in f.rules
    ]
    if not links:
        return "No check names it yet.\n"
    return "Checked by " + ", ".join(links) + ".\n"


def _section(
    title: str, rules: list[str], pool: list[PoolActionFacts], requests: list[RequestActionFacts]
) -> str:
    out = [f"## {title}\n"]
    for rule in rules:
        out.append(f"### {rule}\n")
        text = prose(RULES[rule]).rstrip(".")
        out.append(sentence(text) + ".\n")
        out.append(_checked_by(rule, pool, requests))
    return "\n".join(out)


def rules_page(pool: list[PoolActionFacts], requests: list[RequestActionFacts]) -> str:
    """The page, in the order of :data:`RULES`."""
    pool_rules = [r for r in RULES if r not in REQUEST_RULES]
    request_rules = [r for r in RULES if r in REQUEST_RULES]
    return (
        GENERATED
        + "# Rules of the caller's contract\n\n"
        + "An action outside the contract is refused: the spec raises `ContractViolation` "
        "naming one of these rules and changes nothing, and a pool under test must refuse it "
        "too (the `robustness` level checks this). The ids are stable: errors, traces and "
        "`kvpool rules` quote them. Link one as `rules/#<id>`.\n\n"
        + _section("The pool's rules", pool_rules, pool, requests)
        + "\n"
        + _section("The request level's rules", request_rules, pool, requests)
    )
