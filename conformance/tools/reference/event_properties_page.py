"""``reference/event-properties.md``: the properties of a KV event stream, the consumer
models that judge it, and the function of :mod:`kvpool.spec.consumer` behind each."""

from __future__ import annotations

import ast
import inspect
import types

from kvpool.spec import consumer as consumer_module
from kvpool.spec.consumer import CONSUMER_MODELS, EVENT_PROPERTIES, MODEL_DESCRIPTIONS

from .markdown import GENERATED, code, paragraphs, prose, sentence, summary, table


def checks_of_event_property() -> dict[str, list[types.FunctionType]]:
    """Property id -> the functions of :mod:`kvpool.spec.consumer` whose code names it."""
    found: dict[str, list[types.FunctionType]] = {name: [] for name in EVENT_PROPERTIES}
    for value in vars(consumer_module).values():
        if not isinstance(value, types.FunctionType):
            continue
        if value.__module__ != consumer_module.__name__:
            continue
        named = {
            node.value
            for node in ast.walk(ast.parse(inspect.getsource(value)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        for name in EVENT_PROPERTIES:
            if name in named:
                found[name].append(value)
    return found


def event_properties_page() -> str:
    """The page: the models, then one section per property."""
    checks = checks_of_event_property()
    out = [
        GENERATED,
        "# KV event properties\n",
        "The `events` level (`kvpool conform --level events`) takes a pool's KV events after "
        "every step and feeds them to a consumer model, a subscriber as a KV-aware router "
        "keeps one; these properties are checked after every step. See [The KV events "
        "contract](../guide/kv-events-contract.md) for what each event promises and what "
        "each release does.\n",
        "## Consumer models\n",
        table(
            ("model", "what it keeps"),
            [(code(m), MODEL_DESCRIPTIONS[m]) for m in CONSUMER_MODELS],
        ),
    ]
    for name, text in EVENT_PROPERTIES.items():
        out.append(f"## {name}\n")
        out.append(paragraphs(sentence(prose(text)).rstrip() + "."))
        for check in checks[name]:
            where = code(f"{check.__module__}.{check.__name__}")
            out.append(f"Checked by {where}: {prose(summary(check))}\n")
    return "\n".join(out)
