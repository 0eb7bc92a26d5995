"""The pool operation pages: ``reference/actions/index.md`` and one page per operation, in
reading order: what it does, the call a pool implements (every argument, what the suite
passes, what it reads back), the spec's action, its effect and contract, the transition's
own source, the rules a refusal names, the events, what differs per vLLM release, and the
flat rules it is built from (with their source)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import types

from kvpool.spec.profile import PROFILES, SEED, VLLM_RELEASES, Profile
from kvpool.spec.rules import RULES

from .action_facts import PoolActionFacts
from .code_facts import docstring_conditions, field_comments
from .markdown import GENERATED, bullets, code, fence, paragraphs, prose, summary, table
from .pool_calls import CONSTRUCTOR, READ_BACK, call_of, signature
from .pool_events import event_fields_section
from .profile_values import shown


def page_path(operation: str) -> str:
    """Where the page of ``operation`` lives, relative to ``docs/``."""
    return f"reference/actions/{operation}.md"


def _qualified(function: types.FunctionType) -> str:
    return f"{function.__module__}.{function.__name__}"


def _arguments(facts: PoolActionFacts) -> str:
    fields = dataclasses.fields(facts.action)
    if not fields:
        return "It takes no arguments.\n"
    docs = field_comments(facts.action)
    rows = []
    for f in fields:
        default = code(repr(f.default)) if f.default is not dataclasses.MISSING else "required"
        rows.append((code(f.name), code(str(f.type)), default, prose(docs.get(f.name, ""))))
    return (
        "The spec's value for this call, as traces and vectors record it (blocks by id, "
        "a request by its hashes):\n\n" + table(("field", "type", "default", "what it is"), rows)
    )


def _conditions(label: str, lines: list[str]) -> str:
    if not lines:
        return f"{label}: none stated.\n"
    return f"{label}:\n\n" + bullets(code(line) for line in lines)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: A ``pre:`` line that is a search bound of :mod:`kvpool.spec.bounds`, not contract.
SEARCH_BOUND = re.compile(r"search_\w+\(")


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
            shown(getattr(SEED, f)),
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
        bounds = [line for line in pre if SEARCH_BOUND.match(line)]
        pre = [line for line in pre if line not in bounds]
        out.append(f"### {code(function.__name__)}\n")
        out.append(paragraphs(prose(text)))
        if pre:
            out.append(_conditions("Preconditions", pre))
        if bounds:
            out.append(
                "Search bounds (how far `kvpool crosshair` searches; not part of the contract, "
                "see `kvpool.spec.bounds`):\n\n" + bullets(code(line) for line in bounds)
            )
        if post:
            out.append(_conditions("Postconditions", post))
        out.append(_terms(function, pre + post))
        out.append(_source(function))
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


def _source(function: types.FunctionType) -> str:
    """``function``'s own source, read from the spec when the site is built."""
    where = code(_qualified(function))
    return f"Source of {where}:\n\n" + fence(inspect.getsource(function), "python")


def _transition(facts: PoolActionFacts) -> str:
    """The caller's contract (when the operation has one) and the transition, as source."""
    if facts.check.__name__ == "_no_check":
        return (
            "It has no caller's contract beyond the profile offering it. The transition, as "
            "the spec states it:\n\n" + _source(facts.transition)
        )
    return (
        "The caller's contract, then the transition itself, as the spec states them:\n\n"
        + _source(facts.check)
        + "\n"
        + _source(facts.transition)
        + "".join("\n" + _source(helper) for helper in _helpers(facts))
    )


def _helpers(facts: PoolActionFacts) -> list[types.FunctionType]:
    """The functions of the transition's own module that it calls (``release`` for
    ``free_blocks``), so that the page shows every step between it and the flat rules."""
    module = facts.transition.__module__
    found: dict[str, types.FunctionType] = {}
    for name in _NAME.findall(inspect.getsource(facts.transition)):
        value = facts.transition.__globals__.get(name)
        if (
            isinstance(value, types.FunctionType)
            and value.__module__ == module
            and value not in (facts.transition, facts.check)
            and not name.endswith("_violation")
            and name != "refuse"  # raises the refusal the check returned: on every page
        ):
            found.setdefault(name, value)
    return list(found.values())


def _pool_call(facts: PoolActionFacts) -> str:
    """The call a pool implements for this operation, with every argument explained."""
    call = call_of(facts.operation)
    text = (
        f"The suite calls this on {call.on}, with vLLM's `BlockPool` signature (a pool "
        f"built as {code(CONSTRUCTOR)}):\n\n" + fence(signature(facts.operation), "python")
    )
    if call.explained:
        rows = [(code(name), prose(what)) for name, what in call.explained.items()]
        text += "\n" + table(("argument", "what the suite passes"), rows)
    text += f"\nIt returns {call.returns}. "
    text += "What the suite reads back between calls is listed on [Pool operations](index.md).\n"
    return text


def _release_span(i: int) -> str:
    first = ".".join(map(str, VLLM_RELEASES[i][0]))
    if i + 1 == len(VLLM_RELEASES):
        return f"{first} and newer"
    last = VLLM_RELEASES[i + 1][0]
    return f"{first} up to {'.'.join(map(str, last))} (not included)"


def _source_link(version: tuple[int, int, int]) -> str:
    tag = "v" + ".".join(map(str, version))
    return f"[{tag}](https://github.com/vllm-project/vllm/blob/{tag}/vllm/v1/core/block_pool.py)"


def _per_release(facts: PoolActionFacts) -> str:
    """How each vLLM release differs from the seed for this operation, oldest first; runs
    of releases that agree are one line."""
    lines: list[str] = []
    for i, (first, profile) in enumerate(VLLM_RELEASES):
        if facts.operation not in profile.operations:
            what = "not offered (refused with `unsupported-action`)"
        else:
            changed = [
                f"{code(f)} = {shown(getattr(profile, f))}"
                for f in facts.profile_fields
                if getattr(profile, f) != getattr(SEED, f)
            ]
            what = ", ".join(changed) if changed else "as the seed"
        line = f"{what} (profile {code(profile.name)}; source {_source_link(first)})"
        lines.append(f"vLLM {_release_span(i)}: {line}")
    return (
        "What the releases do by design, against the `seed` profile this page describes "
        "(each release is checked against its own profile; see "
        "[profiles](../profiles.md)):\n\n" + bullets(lines)
    )


def operation_page(facts: PoolActionFacts) -> str:
    """The whole page of one pool operation. Its *Effect* is the transition's docstring
    prose, which must say what the operation does and what it returns."""
    effect, _, _ = docstring_conditions(facts.transition)
    if not effect:
        raise ValueError(
            f"{_qualified(facts.transition)} has no docstring prose: its operation page needs "
            "an Effect (what it does, and what it returns)"
        )
    parts = [
        GENERATED,
        f"# {facts.operation}\n",
        paragraphs(prose(summary(facts.action))),
        f"The action is {code('kvpool.spec.' + facts.action.__name__)}. " + _offered(facts),
        "## The call a pool implements\n",
        _pool_call(facts),
        *(
            ["## Events a pool publishes\n", event_fields_section()]
            if facts.operation == "take_events"
            else []
        ),
        "## The spec's action\n",
        _arguments(facts),
        "## Effect\n",
        paragraphs(prose(effect)),
        "## Contract\n",
        _contract(facts),
        "## The transition\n",
        _transition(facts),
        "## Errors\n",
        _errors(facts),
        "## Events\n",
        _events(facts),
        "## Per release\n",
        _per_release(facts),
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
        "lacks it.\n\n"
        + table(("operation", "what it does", "rules it checks", "events"), rows)
        + "\n## What the suite reads from a pool\n\n"
        + "A pool is built as "
        + code(CONSTRUCTOR)
        + " (or by a factory taking those keywords). Between calls the suite reads what "
        "the pool shows of its state; only the free count is required, and everything "
        "present is compared after every step:\n\n" + table(("what", "what it is"), READ_BACK)
    )
