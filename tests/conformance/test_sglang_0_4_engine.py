"""SGLang 0.4.6.post5 at the engine machine: the release's own ``Scheduler`` methods plan
every batch (``handle_generate_request``, ``get_next_batch_to_run``, ``run_batch`` with
the suite as the model, ``process_batch_result``), the suite plays the clients and the
model.

A fault planted in a copy of the release's ``schedule_batch.py`` (``Req.
init_next_round_input`` matches the whole prompt, not ``adjust_max_prefix_ids``' cap one
token short of it) is caught, and the unplanted release does not show it: on a
four-action sequence here (seconds), and with ``KVPOOL_LONG=1`` on the machine's own
seeds 1-3 with pages of one token and of the drawn size, where the unplanted release
passes and the planted one fails with a shrunk sequence that replays.

Its two KV-event findings are shown on the release's own code: every node stored under
the root names ``hash(())`` as its parent, a hash no event stored (the finding kept in
``findings/sglang-0.4.6.post5*``), and a node's hash is that of its own tokens, so the
set consumer loses a hash two nodes share when one of them goes.

Needs the ``sglang`` extra (torch, msgspec, zmq, pydantic) and the release's files
(downloaded into the cache once); pages of more than one token need triton (the
``sglang-kernels`` extra).
"""

from __future__ import annotations

import ast
import importlib.util
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sglang_planted import planted_tree

pytest.importorskip("torch", reason="SGLang's allocator needs torch: pip install -e '.[sglang]'")

from kvpool.conformance.consumers.judge import StreamJudge
from kvpool.conformance.engines.sglang import driver_0_4
from kvpool.conformance.engines.sglang.driver_0_4 import (
    SglangScheduler04Driver,
    SglangScheduler04Drivers,
)
from kvpool.conformance.engines.sglang.scheduler_reading import NotWired
from kvpool.conformance.engines.sglang.scheduler_release_0_4 import (
    SglangScheduler04,
    load_scheduler_tree,
    scheduler_files,
)
from kvpool.conformance.engines.sglang.tree_view import event_hash
from kvpool.conformance.machines.engine.actions import Arrive, RunStep
from kvpool.conformance.machines.engine.command import load_driver
from kvpool.conformance.machines.engine.driver import EngineSetup, Sampled, Submission
from kvpool.conformance.machines.engine.driver_check import driver_problems
from kvpool.conformance.machines.engine.runner import engine_case, replay_engine, run_engine
from kvpool.conformance.machines.pool.lockstep import RunRecord
from kvpool.conformance.machines.pool.signature import signature
from kvpool.conformance.search.choices import RandomChoices
from kvpool.conformance.targets.errors import TargetLoadError
from kvpool.conformance.targets.loading import described, load_manager
from kvpool.conformance.targets.releases.files import cached_files
from kvpool.spec import AllBlocksCleared, BlockStored

VERSION = "0.4.6.post5"
#: The planted fault: a request matches its whole prompt against the tree.
MATCH_LINE = "rid=self.rid, key=self.adjust_max_prefix_ids()"
PLANTED = "rid=self.rid, key=self.fill_ids"
LONG = os.environ.get("KVPOOL_LONG") == "1"
#: The known finding with pages (``findings/sglang-0.4.6.post5-paged``): the decode memory
#: check counts a new page one token late without the overlap loop.
DECODE_OOM = "Decode out of memory"
SETUP = EngineSetup(8, 1, 32, 2)
PAGED = EngineSetup(8, 2, 32, 2)
KERNELS = importlib.util.find_spec("triton") is not None
needs_kernels = pytest.mark.skipif(
    not KERNELS, reason="the paged kernels run in triton's interpreter: pip install triton"
)


def drivers(release: SglangScheduler04, page: int | None = 1) -> SglangScheduler04Drivers:
    return SglangScheduler04Drivers(release, release.label, page)


@pytest.fixture(scope="module")
def root() -> Path:
    return cached_files(scheduler_files(), VERSION)


@pytest.fixture(scope="module")
def release(root: Path) -> SglangScheduler04:
    return load_scheduler_tree(root, f"sglang {VERSION}")


@pytest.fixture(scope="module")
def planted(root: Path, tmp_path_factory: pytest.TempPathFactory) -> SglangScheduler04:
    copy = planted_tree(
        root, tmp_path_factory, "srt/managers/schedule_batch.py", MATCH_LINE, PLANTED
    )
    return load_scheduler_tree(copy, f"sglang {VERSION}, planted")


def served(driver: SglangScheduler04Driver, rid: str, prompt: tuple[int, ...]) -> int:
    """``prompt`` sent, planned and answered with one token; the hit it was granted."""
    driver.submit(Submission(rid, prompt, None, 1))
    (planned,) = driver.step().scheduled
    assert planned.start + planned.num_tokens == len(prompt)
    driver.report([Sampled(rid, 1, True)])
    return planned.start


def test_the_driver_drives_the_releases_own_scheduler(
    release: SglangScheduler04, root: Path
) -> None:
    driver = SglangScheduler04Driver(release, SETUP, "sglang")
    assert driver_problems(driver) == []
    scheduler_class = type(driver.scheduler).__mro__[1]
    assert scheduler_class is release.scheduler.Scheduler
    assert release.scheduler.__file__ is not None
    assert release.scheduler.__file__.startswith(str(root))
    assert driver.free_count() == SETUP.num_blocks - 1
    # __init__'s own statements set what the loop reads (here: the policy and ratios)
    assert (
        type(driver.scheduler.policy)
        is release.modules["sglang.srt.managers.schedule_policy"].SchedulePolicy
    )
    assert 0 < driver.scheduler.min_new_token_ratio < driver.scheduler.new_token_ratio <= 1


def test_only_init_statements_setting_what_the_loop_reads_run(
    release: SglangScheduler04, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Scheduler.__init__``'s statements that run are those assigning attributes of
    ``WIRED`` only: the policy and the ratios are among them, the model worker, the
    sockets and the watchdog thread are not. Without ``policy`` in ``WIRED`` the scheduler
    reads an attribute nobody gave: a loading error, never a finding."""
    kept = driver_0_4._init_statements(release)
    stored = {
        node.attr
        for statement in kept.body
        for node in ast.walk(statement)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    }
    assert {"policy", "new_token_ratio", "waiting_queue", "max_total_num_tokens"} <= stored
    assert not stored & {"tp_worker", "recv_from_tokenizer", "parent_process", "tree_cache"}
    monkeypatch.setattr(driver_0_4, "WIRED", driver_0_4.WIRED - {"policy"})
    driver = SglangScheduler04Driver(release, SETUP, "sglang")
    driver.submit(Submission("a", (1, 2), None, 1))
    with pytest.raises(NotWired, match="'policy'"):
        driver.step()


def test_the_requests_machine_refuses_0_4_and_names_the_engine_machine() -> None:
    """0.4's radix cache too is called only by its scheduler's own code: the requests
    machine refuses the release (exit 2, no traceback) and names the engine machine."""
    from click.testing import CliRunner
    from kvpool.conformance.cli import main

    for target in ("sglang", f"sglang=={VERSION},page=2"):
        argv = ["conform", "--target", target, "--machine", "requests"]
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 2, result.output
        assert "--machine engine" in " ".join(result.output.split())
        assert "Traceback" not in result.output
    with pytest.raises(TargetLoadError, match="--machine engine"):
        load_manager(f"sglang=={VERSION}", "impl")


@pytest.mark.parametrize("option", ["page=0", "page=3", "page=x", "pages=2"])
def test_a_page_size_it_cannot_take_is_refused(option: str) -> None:
    with pytest.raises(TargetLoadError, match=r"'page=N' \(N tokens a page, a power of two"):
        load_driver(described(f"sglang,{option}"))


def test_a_tree_without_the_scheduler_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TargetLoadError, match=r"not an SGLang checkout"):
        load_driver(described(f"sglang@{tmp_path}"))


def test_the_machine_draws_with_the_block_size_the_engine_is_built_for(
    release: SglangScheduler04,
) -> None:
    """``page=1``: the engine machine draws its setups with blocks of one token (the
    factory's ``block_size``); ``page=drawn``: with the drawn block (2 or 4)."""
    built: list[EngineSetup] = []

    class Seen(SglangScheduler04Drivers):
        def __call__(self, setup: EngineSetup) -> SglangScheduler04Driver:
            built.append(setup)
            return super().__call__(setup)

    for page, sizes in ((1, {1}), (None, {2, 4})):
        built.clear()
        for seed in range(6):
            engine_case(Seen(release, "sglang", page), 12, None)(
                RandomChoices(str(seed)), RunRecord()
            )
        assert {setup.block_size for setup in built} <= sizes and built, (page, built)


def test_a_second_prompt_hits_what_the_first_left(release: SglangScheduler04) -> None:
    """Two turns of one prompt: the second is granted all tokens but the last (SGLang
    recomputes the last token); a flush with nothing running empties the tree."""
    driver = SglangScheduler04Driver(release, SETUP, "sglang")
    prompt = (1, 2, 3, 4, 5)
    assert [served(driver, rid, prompt) for rid in ("a", "b")] == [0, 4]
    assert driver.flush() is True
    assert driver.free_count() == SETUP.num_blocks - 1


@needs_kernels
def test_a_paged_hit_is_cut_to_whole_pages(release: SglangScheduler04) -> None:
    """With pages of two tokens (the kernels in triton's interpreter) the second turn is
    granted the whole pages before the last token."""
    driver = SglangScheduler04Driver(release, PAGED, "sglang")
    assert [served(driver, rid, (1, 2, 3, 4, 5, 6)) for rid in ("a", "b")] == [0, 4]


@needs_kernels
def test_a_short_free_list_is_no_host_read_past_its_end(release: SglangScheduler04) -> None:
    """The decode kernel reads the page after the last free one without a mask; with no
    free page at all the allocator, padded as device memory is, returns ``None`` (SGLang's
    own out-of-memory answer) instead of reading past the host buffer."""
    import torch

    paged = release.paged_allocator.PagedTokenToKVPoolAllocator(8, 2, torch.float16, "cpu", None)
    assert paged.alloc(8) is not None  # every page taken
    got = paged.alloc_decode(torch.tensor([5], dtype=torch.int64), torch.tensor([3]))
    assert got is None and len(paged.free_pages) == 0


def test_pages_without_triton_name_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvpool.conformance.engines.sglang import scheduler_release_0_4 as loader
    from kvpool.conformance.engines.sglang.loader import SglangUnavailable

    loader.require_kernels(1)  # pages of one token run no kernel
    monkeypatch.setattr(loader.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SglangUnavailable, match="sglang-kernels"):
        loader.require_kernels(2)


def test_a_match_of_the_whole_prompt_is_caught(
    release: SglangScheduler04, planted: SglangScheduler04
) -> None:
    """The shrunk sequence the machine finds on seed 1 (pages of one token): a prompt
    served, then the same prompt: matched whole, nothing is left to compute."""
    actions = [Arrive("r5", (9,), None, 1), Arrive("r6", (9,), None, 1), RunStep(()), RunStep(())]
    setup = EngineSetup(8, 1, 32, 1)
    found, _ = replay_engine(drivers(planted), setup, actions, skip=False)
    assert found is not None and "computes-last-token" in found, found
    clean, _ = replay_engine(drivers(release), setup, actions, skip=False)
    assert clean is None, clean


@pytest.mark.skipif(not LONG, reason="seeds 1-3, two page sizes, minutes: set KVPOOL_LONG=1")
@pytest.mark.parametrize("page", [1, pytest.param(None, marks=needs_kernels)], ids=["1", "drawn"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeds_pass_and_the_planted_fault_is_caught_shrunk(
    release: SglangScheduler04, planted: SglangScheduler04, seed: int, page: int | None
) -> None:
    """The unplanted release shows nothing but the known decode finding (pages of more
    than one token: ``findings/sglang-0.4.6.post5-paged``); the planted one is caught."""

    def run(chosen: SglangScheduler04) -> Any:
        return run_engine(
            drivers(chosen, page), max_examples=60, steps=40, seed=seed, max_blocks=12,
            max_findings=3,
        )  # fmt: skip

    clean = run(release)
    unknown = [f.message for f in clean.failures if DECODE_OOM not in f.message or page == 1]
    assert not unknown, unknown
    assert clean.record.properties["own-contents"] > 0
    found = [f for f in run(planted).failures if "computes-last-token" in f.message]
    assert found, "the planted fault went unseen"
    failure = found[0]
    assert 2 <= len(failure.trace) <= 12, failure.trace
    again, _ = replay_engine(drivers(planted, page), failure.config, failure.trace, skip=False)
    assert again is not None and signature(again) == signature(failure.message)


# --- its KV events --------------------------------------------------------------------


def residency(driver: SglangScheduler04Driver) -> dict[tuple[int, bytes], int]:
    """What the tree holds in its events' terms: each node's hash, with multiplicity."""
    held: Counter[tuple[int, bytes]] = Counter()
    stack = list(driver.scheduler.tree_cache.root_node.children.values())
    while stack:
        node = stack.pop()
        held[(0, event_hash(hash(tuple(node.key))))] += 1
        stack.extend(node.children.values())
    return dict(held)


def test_the_first_insert_names_the_roots_hash_as_its_parent(release: SglangScheduler04) -> None:
    """Every node under the root is stored with ``parent_block_hash = hash(())``, a hash
    the stream never stored (vLLM's first block names no parent): the finding kept in
    ``findings/sglang-0.4.6.post5``, on both consumers."""
    actions = [Arrive("a", (2, 3), None, 1), RunStep(())]
    events_on = EngineSetup(8, 1, 32, 2, enable_kv_cache_events=True)
    for consumer in ("count", "set"):
        found, _ = replay_engine(drivers(release), events_on, actions, False, consumer)
        assert found is not None and "property 'events-parent-known'" in found, found
        assert f"the {consumer} consumer" in found
    driver = SglangScheduler04Driver(release, events_on, "sglang")
    served(driver, "a", (2, 3, 4))
    stored = [e for e in driver.drain_events() if isinstance(e, BlockStored)]
    assert [e.parent_block_hash for e in stored] == [event_hash(hash(()))]
    assert stored[0].num_tokens == 3  # a node (the prompt), not a page


def test_one_hash_for_the_same_tokens_under_two_prefixes(release: SglangScheduler04) -> None:
    """A node's hash is that of its own tokens: ``[1, 2]`` under ``[3]`` and ``[1, 2]``
    under the root publish one hash. The count consumer keeps both copies and follows the
    tree; the set consumer loses the hash when one of them is evicted."""
    events_on = EngineSetup(12, 1, 32, 2, enable_kv_cache_events=True)
    judged = {}
    for model in ("count", "set"):
        driver = SglangScheduler04Driver(release, events_on, "sglang")
        served(driver, "a", (3, 1, 2))
        served(driver, "c", (3, 9))  # splits [3, 1, 2] into [3] -> [1, 2]
        served(driver, "b", (1, 2))
        assert Counter(residency(driver).values()) == Counter({1: 2, 2: 1})  # [1, 2] twice
        check = StreamJudge(model)
        found = check.feed(driver.drain_events(), residency(driver))
        assert [v.property for v in found if v.property != "events-parent-known"] == []
        driver.scheduler.tree_cache.evict(1)  # the oldest leaf: a's [1, 2] under [3]
        judged[model] = [v.property for v in check.feed(driver.drain_events(), residency(driver))]
    assert judged == {"count": [], "set": ["events-replay-index"]}, judged


def test_a_flush_publishes_all_blocks_cleared(release: SglangScheduler04) -> None:
    events_on = EngineSetup(8, 1, 32, 2, enable_kv_cache_events=True)
    driver = SglangScheduler04Driver(release, events_on, "sglang")
    served(driver, "a", (1, 2))
    driver.drain_events()
    assert driver.flush() is True
    assert driver.drain_events() == [AllBlocksCleared()]
