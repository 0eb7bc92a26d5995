"""``reference/properties.md``: the request level's named properties, each with its statement
and the check that judges it."""

from __future__ import annotations

import ast
import inspect
import types

from kvpool.spec.manager import ATTRIBUTES
from kvpool.spec.manager import properties as properties_module
from kvpool.spec.manager.properties import PROPERTIES
from kvpool.spec.profile import PROFILES, VLLM_RELEASES

from .markdown import GENERATED, code, paragraphs, prose, sentence, summary, table


def checks_of_property() -> dict[str, list[types.FunctionType]]:
    """Property id -> the check functions of :mod:`properties` that can report it (those
    whose code names the id in a string literal)."""
    found: dict[str, list[types.FunctionType]] = {name: [] for name in PROPERTIES}
    for value in vars(properties_module).values():
        if not isinstance(value, types.FunctionType):
            continue
        if value.__module__ != properties_module.__name__:
            continue
        tree = ast.parse(inspect.getsource(value))
        named = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        for name in PROPERTIES:
            if name in named:
                found[name].append(value)
    return found


def properties_page() -> str:
    """The page, in the order of :data:`PROPERTIES`."""
    checks = checks_of_property()
    out = [
        GENERATED,
        "# Request-level properties\n",
        "The request machine (`kvpool conform --machine requests`) runs request actions "
        "through a KV cache manager and checks these after every step, on the spec's manager "
        "over your pool and on your own manager. Each is a check over what can be seen from "
        "outside a manager (block tables, ref counts, keys, block contents), so the same "
        "code judges the spec and any manager under test. See [request "
        "actions](request-actions.md) for the actions themselves.\n",
    ]
    for name, text in PROPERTIES.items():
        out.append(f"## {name}\n")
        out.append(paragraphs(sentence(prose(text)).rstrip() + "."))
        for check in checks[name]:
            where = code(f"{check.__module__}.{check.__name__}")
            out.append(f"Checked by {where}: {prose(summary(check))}\n")
        if name == "keys-partitioned":
            out.append(partitions_section())
    return "\n".join(out)


def _releases_of(profile: str) -> str:
    """The vLLM releases a profile covers, from ``VLLM_RELEASES``."""
    spans = []
    for i, (first, known) in enumerate(VLLM_RELEASES):
        if known.name != profile:
            continue
        start = ".".join(map(str, first))
        if i + 1 < len(VLLM_RELEASES):
            end = ".".join(map(str, VLLM_RELEASES[i + 1][0]))
            spans.append(f">= {start}, < {end}")
        else:
            spans.append(f">= {start}")
    return "; ".join(spans) or "-"


def partitions_section() -> str:
    """Which attributes each profile's block hashes carry (``Profile.key_attributes``)."""
    attributes = table(
        ("attribute", "what it is"), [(code(a), prose(t)) for a, t in ATTRIBUTES.items()]
    )
    rows = [
        (
            code(p.name),
            _releases_of(p.name) if p.name.startswith("vllm-0.") else "-",
            *("yes" if a in p.key_attributes else "-" for a in ATTRIBUTES),
        )
        for p in PROFILES.values()
        if p.name == "seed" or p.name.startswith("vllm-0.")
    ]
    by_profile = table(("profile", "vLLM releases", *(code(a) for a in ATTRIBUTES)), rows)
    return (
        "### What the prefix cache is partitioned by\n\n"
        "Requests carry these attributes beside their tokens; a manager puts each into "
        "the block hashes as an extra key, so that requests differing in it never share a "
        "block over which they differ. A multimodal feature or an embedding enters only "
        "the blocks it lies in (and, through the chain, every later one); the salt and the "
        "LoRA adapter enter every block.\n\n"
        f"{attributes}\n"
        "Which of them a pool's hashing carries is profile data "
        f"({code('Profile.key_attributes')}), measured on each release's own "
        f"{code('get_request_block_hasher')} by "
        f"{code('kvpool.conformance.engines.vllm.key_partitions')}: two requests that "
        "differ in one attribute alone are hashed and compared. "
        f"{code('tests/conformance/test_key_partitions.py')} measures one release per "
        "change again. The spec's manager hashes with the profile's attributes, so on a "
        "release that leaves one out requests differing only in it share blocks by design "
        "(and the property does not count it); the positive control, "
        f"{code('keys-shared')}, holds on every profile.\n\n"
        f"{by_profile}"
    )
