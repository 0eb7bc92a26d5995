"""The site builds strictly, and its reference pages say everything the spec holds.

The expected names come from the spec's own tables (never a list written here), so a new
rule, invariant, property, profile or operation that the pages miss fails these tests.
"""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path

import pytest
from docs_build import build
from kvpool.conformance.cli import main
from kvpool.conformance.machines.pool.operations import POOL_OPERATIONS
from kvpool.conformance.tools.reference.action_facts import all_pool_action_facts
from kvpool.conformance.tools.reference.cli_page import kvpool_group, walk
from kvpool.conformance.tools.reference.code_facts import field_comments
from kvpool.conformance.tools.reference.pool_calls import call_of, unexplained
from kvpool.conformance.tools.reference.spec_document import PARTS as SPEC_PARTS
from kvpool.spec import ALL_ACTIONS, INVARIANTS, PROFILES, RULES
from kvpool.spec import profile as profile_module
from kvpool.spec.manager import PROPERTIES, REQUEST_ACTIONS
from kvpool.spec.profile import VLLM_RELEASES
from kvpool.spec.step import TRANSITIONS


def page(site: Path, path: str) -> str:
    """The built page at ``path`` ('reference/rules' -> reference/rules/index.html)."""
    built = site / path / "index.html"
    assert built.is_file(), f"{built} was not built"
    return html.unescape(built.read_text(encoding="utf-8"))


def heading_ids(text: str) -> set[str]:
    return set(re.findall(r'<h[1-6] id="([^"]+)"', text))


def test_strict_build_writes_every_hand_written_page(built_site: Path) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    for source in docs.rglob("*.md"):
        relative = source.relative_to(docs).with_suffix("")
        target = relative.parent if relative.name == "index" else relative
        assert (built_site / target / "index.html").is_file(), f"{source} was not built"


def test_every_operation_has_a_page_with_its_rules_and_events(built_site: Path) -> None:
    facts = {f.operation: f for f in all_pool_action_facts()}
    assert set(facts) == {a.operation for a in ALL_ACTIONS}
    for operation, f in facts.items():
        text = page(built_site, f"reference/actions/{operation}")
        assert "<h1" in text and operation in text
        for rule in f.rules:
            assert f"rules/#{rule}" in text, f"{operation}'s page does not link rule {rule}"
        for event in f.events:
            assert event.__name__ in text, f"{operation}'s page misses event {event.__name__}"
        for field in f.profile_fields:
            assert field in text, f"{operation}'s page misses profile field {field}"
    index = page(built_site, "reference/actions")
    for operation in facts:
        assert f'href="{operation}/"' in index, f"the operations index misses {operation}"


def test_rules_invariants_properties_each_have_their_own_heading(built_site: Path) -> None:
    rules = heading_ids(page(built_site, "reference/rules"))
    assert set(RULES) <= rules, f"rules without a heading: {set(RULES) - rules}"
    invariants = heading_ids(page(built_site, "reference/invariants"))
    assert set(INVARIANTS) <= invariants, f"missing: {set(INVARIANTS) - invariants}"
    properties = heading_ids(page(built_site, "reference/properties"))
    assert set(PROPERTIES) <= properties, f"missing: {set(PROPERTIES) - properties}"


def test_rule_texts_appear_as_the_spec_states_them(built_site: Path) -> None:
    text = " ".join(page(built_site, "reference/rules").split()).lower()
    for rule, statement in RULES.items():
        wanted = " ".join(statement.split()).rstrip(".").lower()
        assert wanted in text, f"rule {rule}'s text is missing"


def test_request_actions_and_profiles_pages_list_everything(built_site: Path) -> None:
    requests = heading_ids(page(built_site, "reference/request-actions"))
    assert {a.operation for a in REQUEST_ACTIONS} <= requests
    profiles = page(built_site, "reference/profiles")
    for name, profile in PROFILES.items():
        assert f">{name}<" in profiles, f"profile {name} has no heading"
        assert " ".join(profile.description.split())[:60] in " ".join(profiles.split())
    for first, _ in profile_module.VLLM_RELEASES:
        release = ".".join(map(str, first))
        assert f">= {release}" in profiles, f"release {release} is not in the version table"


def test_cli_page_shows_every_commands_help(built_site: Path) -> None:
    text = page(built_site, "reference/cli")
    commands = [" ".join(path) for path, _ in walk(kvpool_group(main), ("kvpool",), None)]
    assert "kvpool docs build" in commands and "kvpool conform" in commands
    for command in commands:
        assert f"Usage: {command} " in text, f"the CLI page misses {command}'s help"


def test_mutants_page_shows_every_mutant_and_its_patch(built_site: Path) -> None:
    from kvpool.conformance.tools.mutants.corpus import MUTANTS

    text = page(built_site, "reference/mutants")
    for mutant in MUTANTS:
        assert f'id="{mutant.name}"' in text, f"mutant {mutant.name} has no heading"
        faulty = mutant.new.strip().splitlines()[0].strip()
        assert faulty in text, f"the patch of {mutant.name} is missing"


def test_proofs_page_shows_every_obligation_run(built_site: Path) -> None:
    pytest.importorskip("z3")
    from kvpool.conformance.tools.proofs.obligations import all_obligations

    text = page(built_site, "reference/proofs")
    for obligation in all_obligations():
        assert obligation.name in text, f"obligation {obligation.name} missing"
    assert "obligations passed" in text


def test_lifecycle_page_draws_the_generated_diagram(built_site: Path) -> None:
    text = page(built_site, "guide/lifecycle")
    assert "kvpool:lifecycle-diagram" not in text, "the marker was not replaced"
    assert '<svg class="kvpool-diagram"' in text
    assert text.count('data-edge="') >= 10


def test_changing_the_spec_changes_the_built_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drift: the pages are made from the spec at build time, so a change to the spec's data
    shows in the next build, on the rules page and on every operation page that cites it."""
    planted = "Planted: a block may be freed only while a drift marker says so"
    monkeypatch.setitem(RULES, "free-held", planted)
    changed = dataclasses.replace(PROFILES["vllm-0.33"], description="planted profile text")
    monkeypatch.setitem(PROFILES, "vllm-0.33", changed)
    site = build(tmp_path / "site")
    assert planted in page(site, "reference/rules")
    assert planted in page(site, "reference/actions/free_blocks")
    assert "planted profile text" in page(site, "reference/profiles")


#: Documents the project keeps outside the site; a page that points at one leaves the
#: reader with nothing to follow.
OUTSIDE_THE_SITE = ("SEMANTICS.md", "ARCHITECTURE.md", "STYLE.md", "design notes")


def outside_mentions(site: Path) -> list[str]:
    """``page: phrase`` for every built page that mentions a document outside the site."""
    found = []
    for built in sorted(site.rglob("index.html")):
        text = html.unescape(built.read_text(encoding="utf-8"))
        found += [f"{built.relative_to(site)}: {p}" for p in OUTSIDE_THE_SITE if p in text]
    return found


def test_no_page_points_outside_the_site(built_site: Path, tmp_path: Path) -> None:
    assert not outside_mentions(built_site)
    assert "the contract" in page(built_site, "reference/invariants")
    planted = tmp_path / "guide" / "x" / "index.html"
    planted.parent.mkdir(parents=True)
    planted.write_text("<p>See SEMANTICS.md of the design notes.</p>")
    assert outside_mentions(tmp_path) == [
        "guide/x/index.html: SEMANTICS.md",
        "guide/x/index.html: design notes",
    ]


def test_every_pool_call_argument_is_explained() -> None:
    assert not unexplained()
    assert {op.name for op in POOL_OPERATIONS} == {a.operation for a in ALL_ACTIONS}


def test_each_operation_page_shows_its_call_its_source_and_each_release(
    built_site: Path,
) -> None:
    for f in all_pool_action_facts():
        raw = page(built_site, f"reference/actions/{f.operation}")
        text = re.sub(r"<[^>]+>", "", raw)  # code is highlighted: read it without its spans
        assert f"def {f.transition.__name__}(" in text, f"{f.operation}: no transition source"
        assert call_of(f.operation).method + "(" in text, f"{f.operation}: no pool call"
        for name in call_of(f.operation).explained:
            assert name in text, f"{f.operation}'s page does not explain {name}"
        for first, _ in VLLM_RELEASES:
            tag = "v" + ".".join(map(str, first))
            assert f"/blob/{tag}/vllm/v1/core/block_pool.py" in raw, f"{f.operation}: {tag}"
    free = re.sub(r"<[^>]+>", "", page(built_site, "reference/actions/free_blocks"))
    assert "evict_first" in free and "def free_goes_to_front(" in free


def test_every_field_of_every_spec_action_is_explained() -> None:
    for action in ALL_ACTIONS:
        docs = field_comments(action)
        for f in dataclasses.fields(action):
            assert docs.get(f.name), f"{action.__name__}.{f.name} has no #: comment"


def test_each_release_generation_has_a_page_listing_its_changes(built_site: Path) -> None:
    index = page(built_site, "reference/releases")
    for i, (first, profile) in enumerate(VLLM_RELEASES):
        name = f"vllm-{first[0]}.{first[1]}"
        assert f'href="{name}/"' in index, f"the releases index misses {name}"
        text = page(built_site, f"reference/releases/{name}")
        assert profile.name in text and "Against the seed" in text
        if i:
            before = VLLM_RELEASES[i - 1][1]
            for field in ("unkeyed_free_to_front", "has_evict_first", "has_block_mask"):
                if getattr(before, field) != getattr(profile, field):
                    assert field in text.split('id="against-the-seed"')[0], f"{name}: {field}"
            for op in profile.operations - before.operations:
                assert f"actions/{op}/" in text, f"{name} does not say it adds {op}"


def test_the_spec_document_holds_every_module_and_every_transition(built_site: Path) -> None:
    spec_root = Path(__file__).resolve().parents[2] / "spec"
    on_disk = {
        ".".join(p.relative_to(spec_root).with_suffix("").parts)
        for p in spec_root.rglob("*.py")
        if p.name != "__init__.py"
    }
    listed = {name for _, modules in SPEC_PARTS for name in modules}
    assert listed == on_disk, f"modules missing from the spec document: {on_disk - listed}"
    text = page(built_site, "reference/spec")
    plain = re.sub(r"<[^>]+>", "", text)
    for _, transition in TRANSITIONS.values():
        module = transition.__module__.removeprefix("kvpool.spec.")
        assert f'id="{module}-{transition.__name__}"' in text, transition.__name__
        assert f"def {transition.__name__}(" in plain
    for name, predicate in INVARIANTS.items():
        assert f"def {predicate.__name__}(" in plain, name


def test_each_query_states_what_it_returns(built_site: Path) -> None:
    """A query's page says what it returns, in its Effect and as a postcondition on the
    result (``is_block_writable`` and ``get_usage`` once said only "see the
    postconditions", which did not say)."""
    from kvpool.conformance.tools.reference.code_facts import docstring_conditions

    queries = [
        f for f in all_pool_action_facts() if f.transition.__module__ == "kvpool.spec.queries"
    ]
    assert {f.operation for f in queries} >= {"is_block_writable", "get_usage"}
    for f in queries:
        effect, _, post = docstring_conditions(f.transition)
        assert effect, f"{f.operation}: no Effect"
        assert any(line.startswith("__return__[1].result ==") for line in post), f.operation
        text = page(built_site, f"reference/actions/{f.operation}")
        assert "See the postconditions" not in text
        assert "__return__[1].result ==" in re.sub(r"<[^>]+>", "", text)


def test_a_transition_without_an_effect_fails_its_page() -> None:
    from kvpool.conformance.tools.reference.action_pages import operation_page

    def get_usage(state: object, action: object) -> None:
        pass

    facts = next(f for f in all_pool_action_facts() if f.operation == "get_usage")
    planted = dataclasses.replace(facts, transition=get_usage)
    with pytest.raises(ValueError, match="get_usage has no docstring prose"):
        operation_page(planted)


def guide_table_links(index: str) -> list[str]:
    """The pages the home page's guide table links, in order."""
    section = index.split("## The guide", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| \[[^]]+\]\(((?:guide|workflow)/[^)]+\.md)\)", section, flags=re.M)


def guide_table_differences(index: str, in_nav: list[str]) -> list[str]:
    """The guide pages of the nav the home page's table leaves out, and the ones it lists
    that the nav does not."""
    listed = guide_table_links(index)
    return [f"missing {p}" for p in in_nav if p not in listed] + [
        f"not in the nav: {p}" for p in listed if p not in in_nav
    ]


def test_the_home_pages_guide_table_lists_every_guide_page_of_the_nav() -> None:
    import yaml

    root = Path(__file__).resolve().parents[2]
    nav = yaml.safe_load((root / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    guide = next(item["Guide"] for item in nav if isinstance(item, dict) and "Guide" in item)
    in_nav = [next(iter(entry.values())) for entry in guide]
    index = (root / "docs" / "index.md").read_text(encoding="utf-8")
    assert not guide_table_differences(index, in_nav), "docs/index.md's guide table"
    # the table as it was, without the contract in plain words or the events contract
    planted = "\n".join(
        line
        for line in index.splitlines()
        if "guide/semantics.md" not in line and "guide/kv-events-contract.md" not in line
    )
    assert guide_table_differences(planted, in_nav) == [
        "missing guide/semantics.md",
        "missing guide/kv-events-contract.md",
    ]


def test_the_levels_page_names_every_level_in_the_level_option() -> None:
    from kvpool.conformance.machines.pool.levels import LEVELS

    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "levels.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `--level` |"))
    missing = [name for name in LEVELS if f"`{name}`" not in row]
    assert not missing, f"the --level row of guide/levels.md leaves out {missing}"
