"""``reference/profiles.md``: every profile's settings, the operations each offers, and the
table from vLLM release to profile."""

from __future__ import annotations

from kvpool.spec.actions import ALL_ACTIONS
from kvpool.spec.profile import PROFILES, SEED, VLLM_RELEASES, Profile

from .code_facts import field_comments, profile_choices
from .markdown import GENERATED, bullets, code, prose, table
from .profile_values import shown


def _release(version: tuple[int, int, int]) -> str:
    return ".".join(str(part) for part in version)


def version_table(link: bool = True) -> str:
    """vLLM releases to profiles, from ``VLLM_RELEASES``: each row covers the releases from
    its first one up to the next row's. ``link``: profile names link to their section of
    this page (for the page itself; a fragment on another page shows plain names)."""
    rows = []
    for i, (first, profile) in enumerate(VLLM_RELEASES):
        if i + 1 < len(VLLM_RELEASES):
            span = f">= {_release(first)}, < {_release(VLLM_RELEASES[i + 1][0])}"
        else:
            span = f">= {_release(first)} (and newer, until a newer release is measured)"
        name = code(profile.name)
        # the heading's anchor: Markdown's slugs drop the dots
        rows.append((span, f"[{name}](#{profile.name.replace('.', '')})" if link else name))
    return table(("vLLM releases", "profile"), rows)


def _behaviour_fields() -> list[str]:
    return [f for f in profile_choices() if f != "operations"]


def settings_table() -> str:
    """One row per behaviour field: its meaning, and which profiles hold which value (a
    set-valued field by its members, so the row reads the same in every build)."""
    docs = field_comments(Profile)
    rows = []
    for field in _behaviour_fields():
        by_value: dict[str, list[str]] = {}
        for name, p in PROFILES.items():
            by_value.setdefault(shown(getattr(p, field)), []).append(name)
        rows.append(
            (
                code(field),
                prose(docs.get(field, "")),
                "; ".join(f"{v}: {', '.join(names)}" for v, names in sorted(by_value.items())),
            )
        )
    return table(("field", "what it chooses", "value: profiles"), rows)


def consumer_table() -> str:
    """One row per profile: the consumer model it promises, and where that is written."""
    rows = [
        (p.name, code(p.consumer_contract or "none"), p.consumer_contract_source)
        for p in PROFILES.values()
    ]
    return table(("profile", "promises", "where it is written"), rows)


def operations_table() -> str:
    """One row per operation: the profiles whose pool lacks it."""
    rows = []
    for action in ALL_ACTIONS:
        op = action.operation
        missing = [name for name, p in PROFILES.items() if not p.offers(op)]
        rows.append((f"[{code(op)}](actions/{op}.md)", ", ".join(missing) or "none: every profile"))
    return table(("operation", "not offered by"), rows)


def _profile_section(profile: Profile) -> str:
    differs = [
        f"{code(field)} = {shown(getattr(profile, field))}"
        for field in _behaviour_fields()
        if getattr(profile, field) != getattr(SEED, field)
    ]
    missing = sorted(SEED.operations - profile.operations)
    lines = [f"## {profile.name}\n", prose(profile.description) + ".\n"]
    if profile is SEED:
        lines.append("The contract every other profile is described against.\n")
        return "\n".join(lines)
    if profile.base is not None and profile.reasons:
        changes = [f"{code(knob)}: {prose(reason)}" for knob, reason in profile.reasons]
        lines.append(f"Its file changes from `{profile.base}`:\n\n" + bullets(changes))
    lines.append(
        ("Differs from `seed` in:\n\n" + bullets(differs))
        if differs
        else "Behaves as `seed` wherever both offer an operation.\n"
    )
    if missing:
        lines.append("Lacks: " + ", ".join(code(op) for op in missing) + ".\n")
    releases = [_release(first) for first, p in VLLM_RELEASES if p is profile]
    if releases:
        lines.append("Chosen for vLLM releases from " + ", ".join(releases) + " on.\n")
    return "\n".join(lines)


def profiles_page() -> str:
    """The whole page."""
    return "\n".join(
        [
            GENERATED,
            "# Profiles and vLLM versions\n",
            "A profile is the list of choices where real pools disagree: where a freed block "
            "goes, which operations exist, which inputs a caching call accepts. `kvpool "
            "conform --profile NAME` checks a pool against one; a vLLM target is checked "
            "against its release's profile by default. Every value here is read from "
            "the profile files `kvpool.spec.profile` loads (`spec/profiles/NAME.toml`: a "
            "base and the knobs that differ, each with its reason; the guide's Profiles "
            "page shows the format, and `--profile FILE.toml` takes your own).\n",
            "## vLLM release to profile\n",
            "`profile_for_version(version)` picks the last row at or before the release:\n",
            version_table(),
            "## Settings\n",
            settings_table(),
            "## Operations\n",
            operations_table(),
            "## Consumer contracts\n",
            "What each release promises the subscribers of its KV events (the consumer "
            "model of [KV event properties](event-properties.md)), kept apart from what it "
            "emits: `kvpool conform --level events` judges the stream by the promise unless "
            "`--consumer` names another model, and by `count` where a release promises "
            "none.\n",
            consumer_table(),
            *(_profile_section(p) for p in PROFILES.values()),
        ]
    )
