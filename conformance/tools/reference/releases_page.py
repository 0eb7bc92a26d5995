"""``reference/releases/``: every vLLM release generation as a short document of what it
adds, removes or changes against the one before (and, in one line, against the seed),
generated from the profile data (``VLLM_RELEASES``), the way a fork of a spec lists only
its changes."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kvpool.spec.actions import ALL_ACTIONS
from kvpool.spec.profile import SEED, VLLM_RELEASES, Profile

from .action_facts import all_pool_action_facts
from .code_facts import field_comments, profile_choices
from .markdown import GENERATED, bullets, code, prose, table
from .profile_values import change

#: The nav entry in mkdocs.yml that the hook expands into every release generation's page.
RELEASES_INDEX = "reference/releases/index.md"

Version = tuple[int, int, int]


def _dotted(version: Version) -> str:
    return ".".join(map(str, version))


def release_name(version: Version) -> str:
    """The page name of the generation starting at ``version`` (``vllm-0.24``)."""
    return f"vllm-{version[0]}.{version[1]}"


def release_path(version: Version) -> str:
    return f"reference/releases/{release_name(version)}.md"


def _span(i: int) -> str:
    first = _dotted(VLLM_RELEASES[i][0])
    if i + 1 == len(VLLM_RELEASES):
        return f"vLLM {first} and newer"
    return f"vLLM {first} up to {_dotted(VLLM_RELEASES[i + 1][0])} (not included)"


def _fields() -> list[str]:
    return [f for f in profile_choices() if f != "operations"]


def changes(before: Profile, after: Profile, explained: bool = True) -> list[str]:
    """What ``after`` adds, removes or changes against ``before``, one sentence each (with
    each field's meaning when ``explained``)."""
    docs = field_comments(type(before))
    out = [
        f"{code(f)}: {change(getattr(before, f), getattr(after, f))}"
        + (f" ({prose(docs.get(f, ''))})" if explained else "")
        for f in _fields()
        if getattr(before, f) != getattr(after, f)
    ]
    order = [a.operation for a in ALL_ACTIONS]
    added = [op for op in order if op in after.operations - before.operations]
    removed = [op for op in order if op in before.operations - after.operations]
    if added:
        out.append("adds " + ", ".join(f"[{code(op)}](../actions/{op}.md)" for op in added))
    if removed:
        verb = "does not offer " if before is SEED else "no longer offers "
        out.append(verb + ", ".join(f"[{code(op)}](../actions/{op}.md)" for op in removed))
    return out


def _touched(before: Profile, after: Profile) -> list[str]:
    """The operations whose behaviour a changed field alters."""
    changed = {f for f in _fields() if getattr(before, f) != getattr(after, f)}
    return [
        f"[{code(facts.operation)}](../actions/{facts.operation}.md)"
        for facts in all_pool_action_facts()
        if changed & set(facts.profile_fields) and facts.operation in after.operations
    ]


def _source_link(version: Version) -> str:
    tag = "v" + _dotted(version)
    url = f"https://github.com/vllm-project/vllm/blob/{tag}/vllm/v1/core/block_pool.py"
    return f"[`block_pool.py` at {tag}]({url})"


def release_page(i: int) -> str:
    """The page of the ``i``-th generation of ``VLLM_RELEASES``."""
    first, profile = VLLM_RELEASES[i]
    parts = [
        GENERATED,
        f"# {_span(i)}\n",
        f"Checked against profile [{code(profile.name)}](../profiles.md#"
        f"{profile.name.replace('.', '')}): {prose(profile.description)}. Source: "
        f"{_source_link(first)}.\n",
    ]
    if i:
        previous_first, previous = VLLM_RELEASES[i - 1]
        found = changes(previous, profile)
        parts += [
            f"## Changes since vLLM {_dotted(previous_first)}\n",
            f"Against [the generation before]({release_name(previous_first)}.md) (profile "
            f"{code(previous.name)}):\n\n"
            + (bullets(found) if found else "Nothing the profile captures changed.\n"),
        ]
        touched = _touched(previous, profile)
        if touched:
            parts.append("Operations that behave differently: " + ", ".join(touched) + ".\n")
    else:
        parts.append("The oldest release the suite measures.\n")
    against_seed = changes(SEED, profile)
    parts += [
        "## Against the seed\n",
        (bullets(against_seed) if against_seed else "Behaves as the seed.\n")
        + "\nThe [operation pages](../actions/index.md) describe the seed; each one's "
        "*Per release* section says what this generation does there.\n",
    ]
    return "\n".join(parts)


def releases_index() -> str:
    """``reference/releases/index.md``: one row per generation, with its changes."""
    rows = []
    for i, (first, profile) in enumerate(VLLM_RELEASES):
        before = SEED if i == 0 else VLLM_RELEASES[i - 1][1]
        found = changes(before, profile, explained=False)
        what = "; ".join(found) if found else "nothing the profile captures"
        rows.append((f"[{_span(i)}]({release_name(first)}.md)", code(profile.name), prose(what)))
    return (
        GENERATED
        + "# vLLM releases\n\n"
        + "Each generation of vLLM's `BlockPool` as the one before plus a short list of "
        "changes (the first against the seed), generated from the measured profiles. A "
        "generation starts at the release where the pool's behaviour or API changed; the "
        "releases in between behave as its first.\n\n"
        + table(("releases", "profile", "changes against the generation before"), rows)
    )


def releases_nav() -> list[dict[str, str] | str]:
    """The nav section that replaces :data:`RELEASES_INDEX`."""
    return [
        RELEASES_INDEX,
        *({f"vLLM {_dotted(first)}": release_path(first)} for first, _ in VLLM_RELEASES),
    ]


def release_builders() -> dict[str, Callable[[], str]]:
    """Path under ``docs/`` -> the function writing that page: the index and every
    generation."""
    builders: dict[str, Callable[[], str]] = {RELEASES_INDEX: releases_index}
    for i, (first, _) in enumerate(VLLM_RELEASES):
        builders[release_path(first)] = partial(release_page, i)
    return builders
