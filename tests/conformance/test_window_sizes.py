"""Sliding windows of any token count: the spec's window arithmetic is vLLM's, the request
machine draws windows that are not a whole number of blocks plus one token, and a fault in
the release's window rounding (planted in a copy of vLLM 0.33.0's
``single_type_kv_cache_manager.py``) is caught at default settings on seeds 1, 2 and 3,
where windows of the old sizes alone never show it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.engines.vllm.distribution import MANAGER_CACHE, cached_release
from kvpool.conformance.engines.vllm.releases import MANAGER_WHEEL_MEMBERS
from kvpool.conformance.machines.pool.levels import REQUEST_MIN_BLOCKS
from kvpool.conformance.machines.requests import draw
from kvpool.conformance.search.choices import RandomChoices
from kvpool.impl import KVCacheGroupSpec, KVCacheManager
from kvpool.spec.manager import FULL_ATTENTION, KVGroup, ManagerConfig
from manager_faults import FAULTS, planted_manager_tree  # on sys.path via pytest

ROUNDED_DOWN = FAULTS["sliding window hit blocks rounded down"]


def config(window: int, block_size: int) -> ManagerConfig:
    """A hybrid whose group 1 is a window of ``window`` tokens."""
    blocks, rest = divmod(window, block_size)
    return ManagerConfig(block_size, (FULL_ATTENTION, KVGroup(blocks, rest)))


@pytest.mark.parametrize(
    ("window", "block_size", "hit_blocks"),
    [
        (4096, 16, 256),  # cdiv(4095, 16): a real window over vLLM's default block size
        (4097, 16, 256),  # a whole number of blocks plus one token (the old drawn size)
        (4098, 16, 257),
        (8, 4, 2),  # vLLM's own docstring example: sliding window 8 over 4-token blocks
        (5, 4, 1),
        (6, 4, 2),
    ],
)
def test_a_hit_reads_the_window_tokens_before_the_next_rounded_up(
    window: int, block_size: int, hit_blocks: int
) -> None:
    manager = config(window, block_size)
    assert manager.window_tokens(1) == window
    assert manager.window_hit_blocks(1) == hit_blocks
    assert manager.window_hit_blocks(0) == 0  # full attention reads every block


@pytest.mark.parametrize(
    ("window", "block_size", "computed", "skipped"),
    [
        (4, 2, 7, 2),  # vLLM's docstring: window 4, 7 computed -> tokens 0..3 skipped
        (4, 4, 7, 1),
        (4, 4, 6, 0),
        (4096, 16, 4096, 0),
        (4096, 16, 4111, 1),  # tokens 0..15 are outside the next token's window
        (4097, 16, 4112, 1),
        (4097, 16, 4111, 0),
    ],
)
def test_skipped_blocks_are_the_whole_blocks_before_the_window(
    window: int, block_size: int, computed: int, skipped: int
) -> None:
    manager = config(window, block_size)
    assert manager.skipped_blocks(1, computed) == skipped
    assert manager.skipped_blocks(0, computed) == 0


def test_a_window_of_one_token_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one token before"):
        ManagerConfig(1, (KVGroup(1, 0),))
    with pytest.raises(ValueError, match="at least one token before"):
        KVCacheManager(
            num_gpu_blocks=4,
            block_size=1,
            groups=(KVCacheGroupSpec(sliding_window_blocks=1, sliding_window_rest=0),),
        )


def test_the_machine_draws_windows_of_every_size_from_two_tokens() -> None:
    """Every window from 2 tokens to one block past the layout's whole blocks is drawn,
    windows of at most one block among them."""
    seen: Counter[tuple[int, int]] = Counter()
    for seed in range(2000):
        setup = draw.request_setup(RandomChoices(str(seed)), REQUEST_MIN_BLOCKS)
        manager = setup.manager
        for i, g in enumerate(manager.groups):
            if g.is_sliding:
                assert 1 <= g.sliding_window_rest <= manager.block_size
                seen[(manager.block_size, manager.window_tokens(i))] += 1
    for bs in (2, 3, 4, 6):
        assert {w for b, w in seen if b == bs} == set(range(2, 3 * bs + 1)), bs


@pytest.mark.parametrize(
    ("window", "block_size", "promised"),
    [(2, 2, False), (4, 4, False), (3, 4, False), (5, 4, True), (4097, 16, True)],
)
def test_stores_promise_a_held_parent_except_in_windows_of_at_most_one_block(
    window: int, block_size: int, promised: bool
) -> None:
    blocks, rest = divmod(window - 1, block_size)
    manager = ManagerConfig(block_size, (FULL_ATTENTION, KVGroup(blocks, rest + 1)))
    assert manager.window_tokens(1) == window
    assert manager.parent_known_groups() == ({0, 1} if promised else {0})


def short_window_runs(monkeypatch: pytest.MonkeyPatch, seed: int) -> str | None:
    """The spec's manager on our pool, events judged by the count consumer, every setup a
    hybrid with a window of at most one block; the first finding's message."""
    from kvpool.conformance.machines.requests.runner import (
        events_on_pool,
        pool_builder,
        run_requests,
    )
    from kvpool.conformance.targets.loading import load_target
    from kvpool.spec.profile import SEED

    def short(data: object, groups: tuple[KVGroup, ...], block_size: int) -> tuple[KVGroup, ...]:
        return (FULL_ATTENTION, KVGroup(0, block_size))

    monkeypatch.setattr(draw, "LAYOUTS", ((FULL_ATTENTION, KVGroup(1)),))
    monkeypatch.setattr(draw, "windows", short)
    factory, _ = load_target("impl")
    result = run_requests(
        pool_builder(factory, SEED, "count"), events_on_pool("count"), max_examples=60,
        steps=30, seed=seed, max_blocks=REQUEST_MIN_BLOCKS, shrink_seconds=0.5,
    )  # fmt: skip
    return None if result.failure is None else result.failure.message


def test_a_window_of_one_block_names_removed_parents_and_is_not_judged_on_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The case the scoping exists for happens (judged on every group, the spec's own
    manager and our pool break ``events-parent-known`` in the window's group), and with
    the property scoped to the groups that promise it, the same runs pass."""
    judged_everywhere = monkeypatch.context()
    with judged_everywhere as m:
        m.setattr(ManagerConfig, "parent_known_groups", lambda self: None)
        found = [short_window_runs(m, seed) for seed in (1, 2, 3)]
    assert any(f and "property 'events-parent-known'" in f and "group 1" in f for f in found), found
    assert [short_window_runs(monkeypatch, seed) for seed in (1, 2, 3)] == [None] * 3


@pytest.fixture(scope="module")
def rounded_down(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of vLLM 0.33.0's manager whose sliding-window hit needs
    ``(window - 1) // block_size`` blocks instead of ``cdiv(window - 1, block_size)``."""
    release = cached_release("0.33.0", folder=MANAGER_CACHE, members=MANAGER_WHEEL_MEMBERS)
    return planted_manager_tree(release, tmp_path_factory.mktemp("rounded"), ROUNDED_DOWN)


def conform(tree: Path, seed: int, traces: Path) -> tuple[int, str]:
    args = ["conform", "--target", f"vllm@{tree}", "--machine", "requests", "--manager", "vllm"]
    result = CliRunner().invoke(main, [*args, "--seed", str(seed), "--trace-dir", str(traces)])
    return result.exit_code, result.output


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_rounding_fault_is_caught_at_default_settings(
    rounded_down: Path, seed: int, tmp_path: Path
) -> None:
    code, output = conform(rounded_down, seed, tmp_path)
    assert code == 1, output
    assert "Nonconformance: requests/manager" in output
    assert any(text in output for text in ROUNDED_DOWN.caught_by), output


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_windows_of_the_old_sizes_alone_never_show_it(
    rounded_down: Path, seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every window a whole number of blocks plus one token (as drawn before): ``window - 1``
    is a multiple of the block size, both roundings agree, and the fault passes."""
    monkeypatch.setattr(draw, "windows", lambda data, groups, block_size: groups)
    code, output = conform(rounded_down, seed, tmp_path)
    assert code == 0, output


@pytest.mark.parametrize("rest", [-1, True, 1.5])
def test_the_impl_refuses_a_bad_window_rest(rest: object) -> None:
    with pytest.raises(ValueError, match="sliding_window_rest must be an int >= 0"):
        KVCacheGroupSpec(sliding_window_blocks=1, sliding_window_rest=rest)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sliding_window_rest cannot be negative"):
        KVGroup(1, -1)


@pytest.mark.parametrize(("window", "block_size"), [(8, 4), (6, 4), (9, 4), (12, 3)])
def test_the_impl_keeps_the_spec_window(window: int, block_size: int) -> None:
    """The impl's hit blocks and skipped blocks for a window are the spec's."""
    blocks, rest = divmod(window, block_size)
    spec = config(window, block_size)
    manager = KVCacheManager(
        num_gpu_blocks=16,
        block_size=block_size,
        groups=(KVCacheGroupSpec(), KVCacheGroupSpec(blocks, rest)),
    )
    tokens = tuple(range(1, 5 * block_size + 2))
    assert manager.admit("r", tokens) is not None  # no hit in an empty pool
    table = manager.commit("r").block_ids[1]
    cut = spec.skipped_blocks(1, len(tokens))
    assert cut > 0 and list(table[:cut]) == [0] * cut and 0 not in table[cut:]
