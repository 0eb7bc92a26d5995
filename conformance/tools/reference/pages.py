"""Every generated reference page, by its path under ``docs/``, and the nav entries the
operation pages need. The docs hook and ``kvpool docs generate`` both call
:func:`reference_pages`."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import click
from kvpool.spec.actions import ALL_ACTIONS
from kvpool.spec.consumer import EVENT_PROPERTIES
from kvpool.spec.invariants import INVARIANTS
from kvpool.spec.manager.actions import REQUEST_ACTIONS
from kvpool.spec.manager.properties import PROPERTIES
from kvpool.spec.profile import PROFILES
from kvpool.spec.rules import RULES

from .action_facts import all_pool_action_facts, all_request_action_facts
from .action_pages import operation_page, operations_index, page_path
from .cli_page import cli_page
from .event_properties_page import event_properties_page
from .invariants_page import invariants_page
from .markdown import GENERATED, table
from .mutants_page import mutants_page
from .profiles_page import profiles_page
from .proofs_page import proofs_page
from .properties_page import properties_page
from .releases_page import release_builders
from .request_actions_page import request_actions_page
from .rules_page import rules_page
from .spec_document import spec_document

#: The nav entry in mkdocs.yml that the hook expands into every operation's page.
OPERATIONS_INDEX = "reference/actions/index.md"


def index_page() -> str:
    """``reference/index.md``: what each reference page holds, with counts from the spec."""
    rows = [
        (
            "[Pool operations](actions/index.md)",
            f"{len(ALL_ACTIONS)} operations: arguments, "
            "effect, pre- and postconditions, errors, events, profile fields",
        ),
        (
            "[Request actions](request-actions.md)",
            f"{len(REQUEST_ACTIONS)} request actions "
            "of the KV cache manager and the pool operations each calls",
        ),
        (
            "[The spec in one document](spec.md)",
            "every module of the spec in reading order, with its code",
        ),
        ("[Rules](rules.md)", f"{len(RULES)} rules of the caller's contract, by id"),
        ("[Invariants](invariants.md)", f"{len(INVARIANTS)} invariants and their predicates"),
        (
            "[Request-level properties](properties.md)",
            f"{len(PROPERTIES)} properties the request machine checks",
        ),
        (
            "[KV event properties](event-properties.md)",
            f"{len(EVENT_PROPERTIES)} properties of a KV event stream the events level checks",
        ),
        (
            "[Profiles and vLLM versions](profiles.md)",
            f"{len(PROFILES)} profiles, their settings, and the vLLM release table",
        ),
        (
            "[vLLM releases](releases/index.md)",
            "each release generation as the one before plus its changes",
        ),
        ("[Proofs](proofs.md)", "the obligations `kvpool prove` proves, run at build time"),
        ("[Mutants](mutants.md)", "the planted bugs `kvpool mutants` scores the suite with"),
        ("[Command line](cli.md)", "every `kvpool` command's `--help`"),
    ]
    return (
        GENERATED
        + "# Reference\n\n"
        + "These pages are generated from the spec (`kvpool.spec`) each time the site is "
        "built, so they say what the oracle does, never what it used to do. Link them in a "
        "review: every rule, invariant, property and profile has its own heading.\n\n"
        + table(("page", "what it holds"), rows)
    )


def reference_builders(cli: click.Group) -> dict[str, Callable[[], str]]:
    """Path under ``docs/`` -> the function that writes that page (nothing is run yet);
    ``cli`` is the ``kvpool`` command, whose help the command-line page shows."""
    pool = all_pool_action_facts()
    requests = all_request_action_facts()
    builders: dict[str, Callable[[], str]] = {
        "reference/index.md": index_page,
        OPERATIONS_INDEX: lambda: operations_index(pool),
        "reference/request-actions.md": lambda: request_actions_page(requests),
        "reference/rules.md": lambda: rules_page(pool, requests),
        "reference/invariants.md": invariants_page,
        "reference/properties.md": properties_page,
        "reference/event-properties.md": event_properties_page,
        "reference/profiles.md": profiles_page,
        "reference/proofs.md": proofs_page,
        "reference/mutants.md": mutants_page,
        "reference/cli.md": partial(cli_page, cli),
        "reference/spec.md": spec_document,
    }
    for facts in pool:
        builders[page_path(facts.operation)] = partial(operation_page, facts)
    builders.update(release_builders())
    return builders


def reference_pages(cli: click.Group) -> dict[str, str]:
    """Path under ``docs/`` -> Markdown, for every generated page."""
    return {path: build() for path, build in reference_builders(cli).items()}


def operation_nav() -> list[dict[str, str] | str]:
    """The nav section that replaces :data:`OPERATIONS_INDEX`: the index, then one entry per
    operation in ``ALL_ACTIONS`` order."""
    return [OPERATIONS_INDEX, *({a.operation: page_path(a.operation)} for a in ALL_ACTIONS)]
