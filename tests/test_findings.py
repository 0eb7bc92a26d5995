"""The findings in real pools still hold: every committed trace replays to the same kind of
difference, and docs/findings.md is what the traces say. A finding that disappears (fixed
upstream, or changed by our suite) fails here until findings/collect.py is run again."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.trace.files import read_trace
from kvpool.conformance.trace.replay import replay_trace

ROOT = Path(__file__).resolve().parents[1]
ENGINE_SUFFIX = ".engine.itf.json"
FINDINGS = [
    p for p in sorted((ROOT / "findings").rglob("*.itf.json")) if not p.name.endswith(ENGINE_SUFFIX)
]
#: The engine machine's findings, replayed on the engine each names (a built-in entry).
ENGINE_FINDINGS = sorted((ROOT / "findings").rglob(f"*{ENGINE_SUFFIX}"))
#: Targets whose pool needs an optional extra: the module it needs, and the extra.
EXTRAS = {
    "lmdeploy": ("numpy", "lmdeploy"),
    "nanovllm": ("xxhash", "nanovllm"),
    "sglang": ("torch", "sglang"),
}


def _has_vllm_router() -> bool:
    from kvpool.conformance.consumers.protocol import ConsumerError
    from kvpool.conformance.consumers.vllm_router import find_binary

    try:
        find_binary()
    except ConsumerError:
        return False
    return True


def collect() -> ModuleType:
    spec = importlib.util.spec_from_file_location("collect", ROOT / "findings" / "collect.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", FINDINGS, ids=[f"{p.parent.name}/{p.name}" for p in FINDINGS])
def test_the_finding_still_reproduces(path: Path) -> None:
    needs = EXTRAS.get(path.parent.name.split("-")[0])
    if needs is not None and importlib.util.find_spec(needs[0]) is None:
        pytest.skip(f"{path.parent.name} needs {needs[0]}: pip install -e '.[{needs[1]}]'")
    trace = read_trace(path)
    if trace.meta.consumer == "dynamo" and importlib.util.find_spec("dynamo") is None:
        pytest.skip("a Dynamo router finding needs pip install -e '.[dynamo]'")
    if trace.meta.consumer == "vllm-router" and not _has_vllm_router():
        pytest.skip("a vllm-router finding needs pip install -e '.[vllm-router]'")
    # a file's pool and manager are loaded when we say so
    verdict = replay_trace(trace, trace.meta.target, trace.meta.manager)
    assert not verdict.conforms, f"{path.name} no longer diverges: {verdict.describe()}"
    assert verdict.message is not None
    assert signature(verdict.message) == signature(trace.meta.message), verdict.message
    assert verdict.step == len(trace.actions)


@pytest.mark.parametrize(
    "path", ENGINE_FINDINGS, ids=[f"{p.parent.name}/{p.name}" for p in ENGINE_FINDINGS]
)
def test_the_engine_finding_still_reproduces(path: Path) -> None:
    from kvpool.conformance.machines.engine.command import load_driver
    from kvpool.conformance.machines.engine.runner import replay_engine
    from kvpool.conformance.machines.engine.trace_file import read_engine_trace
    from kvpool.conformance.targets.registry import describe_target

    needs = EXTRAS.get(path.parent.name.split("-")[0])
    if needs is not None and importlib.util.find_spec(needs[0]) is None:
        pytest.skip(f"{path.parent.name} needs {needs[0]}: pip install -e '.[{needs[1]}]'")
    trace = read_engine_trace(path)
    paged_0_4 = trace.target.startswith("sglang==0.4") and trace.setup.block_size > 1
    if paged_0_4 and importlib.util.find_spec("triton") is None:
        pytest.skip("SGLang 0.4's paged kernels run in triton's interpreter: pip install triton")
    factory, _ = load_driver(describe_target(trace.target))  # the registry's entry only
    found, ran = replay_engine(factory, trace.setup, list(trace.actions), False, trace.consumer)
    assert found is not None, f"{path.name} no longer fails"
    assert signature(found) == signature(trace.message), found
    assert len(ran) == len(trace.actions)


def test_vllm_0_33_robustness_findings_include_the_known_bugs() -> None:
    names = {p.name for p in FINDINGS if p.parent.name == "vllm-0.33.0"}
    for kind in (
        "free-held-a-free-block",  # double free: ref_cnt -1
        "free-held-more-often-than-held",  # one block twice in one call (upstream 42571)
        "get-new-blocks-count",  # get_new_blocks(-1)
        "caching-enabled",  # keys registered while caching is off
    ):
        assert any(n.endswith(f"{kind}.itf.json") for n in names), kind
    assert not any(n.startswith(("pool-safety", "pool-order")) for n in names)


def test_every_target_has_a_row_and_the_page_is_current() -> None:
    module = collect()
    folders = {p.parent.name for p in [*FINDINGS, *ENGINE_FINDINGS]}
    assert folders <= set(module.TARGETS.values())  # a target that passes has no traces
    page = module.page()
    for folder in module.TARGETS.values():
        assert f"| {folder} |" in page
    committed = (ROOT / "docs" / "findings.md").read_text(encoding="utf-8")
    assert committed == page, "regenerate with: python findings/collect.py"
