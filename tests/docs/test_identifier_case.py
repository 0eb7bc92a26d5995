"""A rule, property or mutant text that starts with an identifier (an operation such as
``get_new_blocks(n)``, an argument such as ``block_size``) keeps its case on the pages
that quote it: a quoted rule reads exactly as the code spells the name."""

from __future__ import annotations

import re

import pytest
from kvpool.conformance.cli import main
from kvpool.conformance.tools.mutants.corpus import MUTANTS
from kvpool.conformance.tools.reference.markdown import sentence
from kvpool.conformance.tools.reference.pages import reference_builders
from kvpool.spec import ALL_ACTIONS
from kvpool.spec.consumer import EVENT_PROPERTIES
from kvpool.spec.manager.properties import PROPERTIES
from kvpool.spec.rules import RULES

#: The pages that print these texts, each with the texts it prints.
PAGES = {
    "reference/rules.md": list(RULES.values()),
    "reference/properties.md": list(PROPERTIES.values()),
    "reference/event-properties.md": list(EVENT_PROPERTIES.values()),
    "reference/mutants.md": [m.bug for m in MUTANTS],
}

OPERATIONS = sorted({action.operation for action in ALL_ACTIONS})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def identifiers(texts: list[str]) -> set[str]:
    """Every operation name and every snake_case word the texts quote."""
    words = {w for text in texts for w in _WORD.findall(text)}
    return {w for w in words if "_" in w.strip("_")} | set(OPERATIONS)


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    builders = reference_builders(main)
    return {path: builders[path]() for path in PAGES}


@pytest.mark.parametrize("path", sorted(PAGES))
def test_no_identifier_is_recased(path: str, pages: dict[str, str]) -> None:
    recased = {name[0].upper() + name[1:] for name in identifiers(PAGES[path]) if name[0].islower()}
    found = sorted(w for w in recased if re.search(rf"(?<![\w`]){re.escape(w)}\b", pages[path]))
    assert not found, f"{path} re-cases identifiers: {found}"


def test_texts_that_open_with_an_operation_exist() -> None:
    # the check above has something to look at: rules open with operation names
    opening = [t for t in RULES.values() if t.split("(")[0].split()[0] in OPERATIONS]
    assert opening, "no rule text opens with an operation name"


def test_sentence_keeps_identifiers_and_capitalises_words() -> None:
    assert sentence("get_new_blocks(n) needs a count") == "get_new_blocks(n) needs a count"
    assert sentence("touch(ids) is refused") == "touch(ids) is refused"
    assert sentence("block_size must be positive") == "block_size must be positive"
    assert sentence("a block id must be in range") == "A block id must be in range"
    assert sentence("`code` first") == "`code` first"


def test_a_recased_rule_is_caught(pages: dict[str, str]) -> None:
    # plant the old fault: the rules page with its first letters upper-cased
    planted = pages["reference/rules.md"].replace("get_new_blocks(n)", "Get_new_blocks(n)")
    recased = {n[0].upper() + n[1:] for n in identifiers(PAGES["reference/rules.md"])}
    assert any(re.search(rf"(?<![\w`]){re.escape(w)}\b", planted) for w in recased)
