"""The pool operation pages: ``reference/actions/index.md`` and one page per operation, with
its arguments, effect, contract (pre- and postconditions), errors, events, the profile
fields that change it and the flat rules it is built from."""

from __future__ import annotations

import dataclasses
import re
import types

from kvpool.spec.profile import PROFILES, SEED, Profile
from kvpool.spec.rules import RULES

from .action_facts import PoolActionFacts
from .code_facts import docstring_conditions, field_comments
from .markdown import GENERATED, bullets, code, paragraphs, prose, summary, table


def page_path(operation: str) -> str:
    """Where the page of ``operation`` lives, relative to ``docs/``."""
    return f"reference/actions/{operation}.md"


def _qualified(function: types.FunctionType) -> str:
    return f"{function.__module__}.{function.__name__}"


def _arguments(facts: PoolActionFacts) -> str:
    fields = dataclasses.fields(facts.action)
    if not fields:
        return "It takes no arguments.\n"
    rows = []
    for f in fields:
        default = code(repr(f.default)) if f.default is not dataclasses.MISSING else "required"
        rows.append((code(f.name), code(str(f.type)), default))
    return table(("argument", "type", "default"), rows)


def _conditions(label: str, lines: list[str]) -> str:
    if not lines:
        return f"{label}: none stated.\n"
    return f"{label}:\n\n" + bullets(code(line) for line in lines)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


#: Where a term of the conditions is explained at length.
_TERM_PAGES = {"invariants_hold": "../invariants.md", "broken_invariants": "../invariants.md"}


def _term_text(name: str, function: types.FunctionType) -> str:
    text = prose(summary(function))
    if not text and name.endswith("_violation"):
        text = "the caller's contract: `None` when the action is allowed, else the refusal"
    if name in _TERM_PAGES:
        text += f" (see [invariants]({_TERM_PAGES[name]}))"
    return text


def _terms(function: types.FunctionType, lines: list[str]) -> str:
    """The spec functions the condition lines call, each with its summary."""
    seen: dict[str, str] = {}
    for line in lines:
        for name in _NAME.findall(line):
            found = function.__globals__.get(name)
            if (
                isinstance(found, types.FunctionType)
                and found is not function
                and found.__module__.startswith("kvpool.spec")
                and name not in seen
            ):
                seen[name] = _term_text(name, found)
    if not seen:
        return ""
    return "Where:\n\n" + bullets(f"{code(name)}: {text}" for name, text in seen.items())


def _contract(facts: PoolActionFacts) -> str:
    _, pre, post = docstring_conditions(facts.transition)
    return (
        f"As stated on the transition {code(_qualified(facts.transition))} (PEP 316 "
        "conditions; `__return__` is the pair `(next state, observation)`):\n\n"
        + _conditions("Preconditions", pre)
        + "\n"
        + _conditions("Postconditions", post)
        + "\n"
        + _terms(facts.transition, pre + post)
    )


def _errors(facts: PoolActionFacts) -> str:
    text = (
        f"The caller's contract is {code(_qualified(facts.check))}: an action it refuses "
        "raises `ContractViolation` naming one of these rules, and the pool is unchanged.\n\n"
    )
    rows = [(f"[{code(rule)}](../rules.md#{rule})", prose(RULES[rule])) for rule in facts.rules]
    return text + table(("rule", "what it says"), rows)


def _events(facts: PoolActionFacts) -> str:
    if not facts.events:
        return "It publishes no KV event.\n"
    text = "With KV events on, it may publish:\n\n"
    return text + bullets(f"{code(e.__name__)}: {prose(summary(e))}" for e in facts.events)


def _differs(field: str) -> list[str]:
    """The profiles whose value of ``field`` is not the seed's."""
    seed = getattr(SEED, field)
    return [name for name, p in PROFILES.items() if getattr(p, field) != seed]


def _profile_fields(facts: PoolActionFacts) -> str:
    if not facts.profile_fields:
        return "No profile field changes what it does: every profile that offers it agrees.\n"
    docs = field_comments(Profile)
    rows = [
        (
            code(f),
            prose(docs.get(f, "")),
            code(repr(getattr(SEED, f))),
            ", ".join(_differs(f)) or "none",
        )
        for f in facts.profile_fields
    ]
    return table(("profile field", "what it chooses", "seed", "profiles that differ"), rows)


def _flat(facts: PoolActionFacts) -> str:
    if not facts.flat_functions:
        return ""
    out = [
        "## Flat rules\n",
        "The decisions it makes, as pure functions over tuples of ints in "
        "`kvpool.spec.flat`; `kvpool crosshair` searches each one's conditions for "
        "counterexamples.\n",
    ]
    for function in facts.flat_functions:
        text, pre, post = docstring_conditions(function)
        out.append(f"### {code(function.__name__)}\n")
        out.append(paragraphs(prose(text)))
        if pre:
            out.append(_conditions("Preconditions", pre))
        if post:
            out.append(_conditions("Postconditions", post))
        out.append(_terms(function, pre + post))
    return "\n".join(out)


def _offered(facts: PoolActionFacts) -> str:
    missing = [name for name in PROFILES if name not in facts.offered_by]
    if not missing:
        return "Every profile offers it.\n"
    return (
        f"Offered by {', '.join(facts.offered_by)}; not by {', '.join(missing)} "
        "(there it is refused with `unsupported-action`). See "
        "[profiles](../profiles.md).\n"
    )


def operation_page(facts: PoolActionFacts) -> str:
    """The whole page of one pool operation."""
    effect, _, _ = docstring_conditions(facts.transition)
    parts = [
        GENERATED,
        f"# {facts.operation}\n",
        paragraphs(prose(summary(facts.action))),
        f"The action is {code('kvpool.spec.' + facts.action.__name__)}. " + _offered(facts),
        "## Arguments\n",
        _arguments(facts),
        "## Effect\n",
        paragraphs(prose(effect)) if effect else "See the postconditions.\n",
        "## Contract\n",
        _contract(facts),
        "## Errors\n",
        _errors(facts),
        "## Events\n",
        _events(facts),
        "## Profiles\n",
        _profile_fields(facts),
        _flat(facts),
    ]
    return "\n".join(p for p in parts if p)


def operations_index(all_facts: list[PoolActionFacts]) -> str:
    """``reference/actions/index.md``: every operation, one line each."""
    rows = [
        (
            f"[{code(f.operation)}]({f.operation}.md)",
            prose(summary(f.action)),
            ", ".join(code(r) for r in f.rules if r != "unsupported-action") or "none",
            ", ".join(code(e.__name__) for e in f.events) or "none",
        )
        for f in all_facts
    ]
    return (
        GENERATED
        + "# Pool operations\n\n"
        + "Every operation of the pool, as the spec defines it. Each page gives the "
        "operation's arguments, its effect, its pre- and postconditions, the rules a "
        "refusal names, the events it publishes and the profile fields that change it. "
        "Every operation can also be refused with `unsupported-action` by a profile that "
        "lacks it.\n\n" + table(("operation", "what it does", "rules it checks", "events"), rows)
    )
