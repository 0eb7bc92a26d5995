"""``kvpool.conformance.api`` names every hook the suite reads off a target or a factory:
a hook read anywhere in the suite's source but missing from the tables fails here."""

from __future__ import annotations

import re
from pathlib import Path

from kvpool.conformance import api

SOURCE = Path(api.__file__).resolve().parent
#: ``getattr(<a target or factory>, "hook"`` as the suite reads an optional hook.
READ = re.compile(
    r"getattr\(\s*(?:self\.)?(?:target|probe|factory|manager_factory|built|lockstep\.target)"
    r"\s*,\s*(?:\"([a-z_]+)\"|([A-Z_]+))"
)
#: Hooks read through a named constant.
CONSTANTS = {
    "TAKES": "takes",
    "PLAN": "plan",
    "PLAN_FIRST": "plan_first",
    "PLAN_NEXT": "plan_next",
    "OFF_ATTRIBUTE": "kvpool_features_off",
}


def hooks_read(root: Path) -> set[str]:
    found = set()
    for path in root.rglob("*.py"):
        for literal, constant in READ.findall(path.read_text(encoding="utf-8")):
            found.add(literal or CONSTANTS.get(constant, constant))
    return found


DOCUMENTED = {
    *api.POOL_HOOKS,
    *api.POOL_FACTORY_HOOKS,
    *api.MANAGER_HOOKS,
    *api.MANAGER_FACTORY_HOOKS,
    *api.ENGINE_FACTORY_HOOKS,
    *api.ROUTER_HOOKS,
}


def test_every_hook_the_suite_reads_is_in_the_api() -> None:
    read = hooks_read(SOURCE)
    assert {"allows", "checked_by_properties", "supported_setup", "keyed_tokens"} <= read
    assert read <= DOCUMENTED, f"hooks missing from kvpool.conformance.api: {read - DOCUMENTED}"


def test_a_new_undocumented_hook_is_caught(tmp_path: Path) -> None:
    (tmp_path / "run.py").write_text('flag = getattr(self.target, "prefers_tails", False)\n')
    assert hooks_read(tmp_path) - DOCUMENTED == {"prefers_tails"}


def test_every_documented_hook_is_on_the_docs_page() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    page = (docs / "tutorial" / "extension-api.md").read_text(encoding="utf-8")
    for hook in DOCUMENTED:
        assert f"**`{hook}" in page, hook
