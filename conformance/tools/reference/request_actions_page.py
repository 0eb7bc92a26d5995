"""``reference/request-actions.md``: what a scheduler asks of its KV cache manager, one
request action at a time: arguments, rules, and the pool operations each one calls."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

from kvpool.spec.rules import RULES

from .action_facts import RequestActionFacts
from .code_facts import docstring_conditions
from .markdown import GENERATED, bullets, code, paragraphs, prose, table

# ``kvpool.spec.manager.step`` is also a name the package exports: import the module itself
_manager_step = importlib.import_module("kvpool.spec.manager.step")


def _arguments(facts: RequestActionFacts) -> str:
    rows = []
    for f in dataclasses.fields(facts.action):
        default = code(repr(f.default)) if f.default is not dataclasses.MISSING else "required"
        rows.append((code(f.name), code(str(f.type)), default))
    return table(("argument", "type", "default"), rows)


def _section(facts: RequestActionFacts) -> str:
    doc = inspect.cleandoc(facts.action.__doc__ or "")
    rules = bullets(f"[{code(r)}](rules.md#{r}): {prose(RULES[r])}" for r in facts.rules)
    calls = ", ".join(f"[{code(c.operation)}](actions/{c.operation}.md)" for c in facts.pool_calls)
    return "\n".join(
        [
            f"## {facts.operation}\n",
            paragraphs(prose(doc)),
            f"The action is {code('kvpool.spec.manager.' + facts.action.__name__)}.\n",
            _arguments(facts),
            "Refused when it breaks:\n\n" + rules if rules else "It is always in contract.\n",
            f"Pool operations it may call: {calls or 'none'}.\n",
        ]
    )


def request_actions_page(all_facts: list[RequestActionFacts]) -> str:
    """The page, in the order of ``REQUEST_ACTIONS``."""
    _, pre, post = docstring_conditions(_manager_step.manager_step)
    contract = (
        "`manager_step(pool_state, state, action)` applies one request action to the spec's "
        "manager and its pool. Its conditions (PEP 316; `__return__` is `(pool state, "
        "manager state, result)`):\n\n"
        + bullets(f"pre: {code(line)}" for line in pre)
        + bullets(f"post: {code(line)}" for line in post)
    )
    return "\n".join(
        [
            GENERATED,
            "# Request actions\n",
            "The request level: a KV cache manager over the pool. Each request action runs "
            "as a program of [pool operations](actions/index.md), so the same program drives "
            "the spec's pool or a pool under test, and the [request-level "
            "properties](properties.md) are checked after every step. The pool operations "
            "listed for each action are read off the spec's code: every one its program can "
            "reach.\n",
            contract,
            *(_section(f) for f in all_facts),
        ]
    )
