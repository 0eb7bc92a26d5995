"""The request model (kvpool.spec.manager): admission, copy-on-write, windows, release."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kvpool.spec import ContractViolation, PoolConfig, PoolState, initial_state, invariants_hold
from kvpool.spec.keys import make_key
from kvpool.spec.manager import (
    Admit,
    Append,
    Compute,
    EvictCached,
    ExtraKeys,
    Finish,
    KVGroup,
    ManagerConfig,
    ManagerResult,
    ManagerState,
    MultiModalFeature,
    Preempt,
    RequestAction,
    ResetCache,
    Resume,
    Scheduled,
    SpecPool,
    apply_request,
    initial_manager_state,
    manager_step,
)
from kvpool.spec.manager.state import block_hashes
from kvpool.spec.manager.step import holds_match_tables
from kvpool.spec.rules import REQUEST_RULES


class System:
    """The spec's manager over the spec's pool, stepped one request action at a time."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 2,
        groups: tuple[KVGroup, ...] = (KVGroup(),),
        hash_block_size: int = 1,
        caching: bool = True,
    ) -> None:
        config = PoolConfig(num_blocks, enable_caching=caching, hash_block_size=hash_block_size)
        self.pool: PoolState = initial_state(config)
        self.manager: ManagerState = initial_manager_state(
            ManagerConfig(block_size, groups), config
        )

    def __call__(self, action: RequestAction) -> ManagerResult:
        self.pool, self.manager, result = manager_step(self.pool, self.manager, action)
        return result

    def scheduled(self, action: RequestAction) -> Scheduled:
        result = self(action)
        assert isinstance(result, Scheduled)
        return result

    def served(self, rid: str, tokens: tuple[int, ...], salt: str | None = None) -> Scheduled:
        """Admit and compute a request; the admission's result."""
        admitted = self.scheduled(Admit(rid, tokens, salt))
        self.scheduled(Compute(rid))
        return admitted


def test_a_new_request_takes_blocks_from_the_front_and_hits_nothing() -> None:
    system = System(6)
    result = system.scheduled(Admit("a", (1, 2, 3)))
    assert result == Scheduled(0, ((1, 2),))
    assert system.pool.free_queue == (3, 4, 5)


def test_a_shared_prefix_is_a_hit_on_the_same_blocks() -> None:
    system = System(8)
    system.served("a", (1, 2, 3, 4, 5))
    result = system.scheduled(Admit("b", (1, 2, 3, 4, 9)))
    assert result.num_computed_tokens == 4
    assert result.tables[0][:2] == (1, 2)
    assert system.pool.ref_cnt[1] == system.pool.ref_cnt[2] == 2


def test_a_prompt_never_hits_in_full() -> None:
    system = System(8)
    system.served("a", (1, 2, 3, 4))
    system(Finish("a"))
    result = system.scheduled(Admit("b", (1, 2, 3, 4)))
    assert result.num_computed_tokens == 2  # the last block is computed again


def test_another_salt_never_hits() -> None:
    system = System(8)
    system.served("a", (1, 2, 3, 4, 5))
    assert system.scheduled(Admit("b", (1, 2, 3, 4, 5), salt="tenant-b")).num_computed_tokens == 0
    assert system.scheduled(Admit("c", (1, 2, 3, 4, 5))).num_computed_tokens == 4


def test_no_room_refuses_the_admission_and_changes_nothing() -> None:
    system = System(4)
    system.served("a", (1, 2, 3))
    pool, manager = system.pool, system.manager
    assert system(Admit("b", (7, 7, 7, 7, 7))) is None
    assert (system.pool, system.manager) == (pool, manager)


def test_hits_are_touched_before_allocating_so_allocation_cannot_evict_them() -> None:
    system = System(7)
    system.served("a", (1, 2, 3, 4))
    system.served("c", (5, 6, 7, 8))
    system(Finish("a"))
    system(Finish("c"))
    assert system.pool.free_queue == (5, 6, 2, 1, 4, 3)  # a's head (1) is 4th to go
    result = system.scheduled(Admit("b", (1, 2, 9, 9, 9, 9, 9, 9, 9, 9)))
    # allocating 4 blocks first would have evicted block 1, the hit itself
    assert result.tables[0] == (1, 5, 6, 2, 4)
    assert system.pool.primary[1] is not None


def test_a_partial_hit_is_copied_for_a_request_not_yet_running() -> None:
    system = System(8, block_size=4)
    system.scheduled(Admit("a", (1, 2, 3, 4, 5, 6)))
    system.scheduled(Compute("a", cache_partial=True))
    result = system.scheduled(Admit("b", (1, 2, 3, 4, 5, 6, 7)))
    (src, dst) = result.copies[0]
    assert src == 2 and result.tables[0] == (1, dst) and result.num_computed_tokens == 6
    assert system.pool.ref_cnt[src] == 1  # held again only by its owner
    assert system.manager.contents[dst] == system.manager.contents[src]


def test_a_running_request_keeps_its_table_and_moves_its_partial_entry() -> None:
    system = System(8, block_size=4)
    system.scheduled(Admit("a", (1, 2, 3, 4, 5, 6)))
    system.scheduled(Compute("a", cache_partial=True))
    partial_key = system.pool.primary[2]
    assert partial_key is not None
    system.scheduled(Append("a", (7,)))
    result = system.scheduled(Compute("a"))
    (src, dst) = result.copies[0]
    assert result.tables[0] == (1, 2) and src == 2
    assert system.pool.primary[dst] == partial_key  # the entry moved to the copy
    assert system.pool.ref_cnt[dst] == 0 and dst in system.pool.free_queue
    assert system.manager.contents[2].tokens == (5, 6, 7)


def test_a_sliding_window_nulls_and_frees_blocks_that_left_it() -> None:
    system = System(10, groups=(KVGroup(), KVGroup(sliding_window_blocks=1)))
    system.scheduled(Admit("a", (1, 2, 3, 4, 5, 6, 7)))
    result = system.scheduled(Compute("a"))
    full, sliding = result.tables
    assert len(full) == len(sliding) == 4
    assert sliding[:2] == (0, 0) and 0 not in full
    assert all(system.pool.ref_cnt[b] == 0 for b in (5, 6))  # a's dropped window blocks


def test_finish_frees_tail_first_so_the_head_is_evicted_last() -> None:
    system = System(6)
    system.served("a", (1, 2, 3, 4, 5, 6))
    system(Finish("a"))
    assert system.pool.free_queue[-3:] == (3, 2, 1)


def test_a_preempted_request_resumes_from_the_prefix_it_left() -> None:
    system = System(8)
    system.served("a", (1, 2, 3, 4, 5))
    system(Preempt("a"))
    result = system.scheduled(Resume("a"))
    assert result.num_computed_tokens == 4 and result.tables[0][:2] == (1, 2)


def test_reset_succeeds_exactly_when_no_request_holds_a_block() -> None:
    system = System(6)
    system.served("a", (1, 2, 3))
    assert system(ResetCache()) is False
    system(Preempt("a"))
    assert system(ResetCache()) is True
    assert not system.pool.cache


def test_the_keys_registered_are_the_requests_own_prefix_hashes() -> None:
    system = System(8)
    system.served("a", (1, 2, 3, 4, 5), salt="s")
    hashes = block_hashes(system.manager.requests["a"], 1)
    assert system.pool.primary[1] is not None
    assert system.pool.primary[1].key == make_key(hashes[1], 0)


OUT_OF_CONTRACT = [
    pytest.param([Admit("a", (1,)), Admit("a", (2,))], "request-new"),
    pytest.param([Admit("a", ())], "request-tokens"),
    pytest.param([Admit("a", (-1,))], "request-tokens"),
    pytest.param(
        [Admit("a", (1, 2), extra=ExtraKeys(mm=(MultiModalFeature("i", 1, 2),)))],
        "request-extra-keys",
    ),
    pytest.param([Admit("a", (1, 2), extra=ExtraKeys(embeds=(1,)))], "request-extra-keys"),
    pytest.param([Admit("a", (1, 2), report_mode="all")], "request-report-mode"),
    pytest.param([Append("ghost", (1,))], "request-running"),
    pytest.param([Admit("a", (1,)), Preempt("a"), Compute("a")], "request-running"),
    pytest.param([Admit("a", (1,)), Resume("a")], "request-preempted"),
    pytest.param([Finish("ghost")], "request-known"),
    pytest.param([Admit("a", (1, 2)), EvictCached(block_ids=(1,))], "evict-unheld"),
    pytest.param([EvictCached(block_ids=(0,))], "evict-unheld"),
    pytest.param([EvictCached(block_ids=(6,))], "evict-unheld"),
]


@pytest.mark.parametrize(("actions", "rule"), OUT_OF_CONTRACT)
def test_out_of_contract_request_actions_name_their_rule(
    actions: list[RequestAction], rule: str
) -> None:
    system = System(6)
    for action in actions[:-1]:
        system(action)
    pool, manager = system.pool, system.manager
    with pytest.raises(ContractViolation) as caught:
        system(actions[-1])
    assert caught.value.rule == rule
    assert (system.pool, system.manager) == (pool, manager)


def test_every_request_rule_has_a_case() -> None:
    cased = {"partial-full-attention"} | {str(p.values[1]) for p in OUT_OF_CONTRACT}
    assert cased == REQUEST_RULES


def test_evicting_the_head_of_a_cached_prompt_ends_every_hit_there() -> None:
    system = System(8)
    system.served("a", (1, 2, 3, 4, 5, 6, 7))
    system(Finish("a"))
    queue = system.pool.free_queue
    system(EvictCached(block_ids=(1,)))
    assert not system.pool.keys_of(1) and system.pool.keys_of(2)  # block 2 stays cached
    assert system.pool.free_queue == queue  # nothing moved, nothing freed
    assert system.scheduled(Admit("b", (1, 2, 3, 4, 5, 6, 7))).num_computed_tokens == 0


def test_partial_entries_need_full_attention_everywhere() -> None:
    system = System(8, groups=(KVGroup(), KVGroup(sliding_window_blocks=1)))
    system(Admit("a", (1, 2, 3)))
    with pytest.raises(ContractViolation) as caught:
        system(Compute("a", cache_partial=True))
    assert caught.value.rule == "partial-full-attention"


def test_with_caching_off_nothing_is_registered_or_hit() -> None:
    system = System(8, caching=False)
    system.served("a", (1, 2, 3, 4, 5))
    assert system.scheduled(Admit("b", (1, 2, 3, 4, 5))).num_computed_tokens == 0
    assert not system.pool.cache


def test_the_program_only_talks_to_the_pool_through_its_operations() -> None:
    system = System(8)
    pool = SpecPool(system.pool)
    apply_request(pool, system.manager, Admit("a", (1, 2, 3)))
    assert [a.operation for a in pool.calls] == [
        "get_cached_block",  # the first full block
        "get_cached_block",  # a partial entry inside it
        "get_num_free_blocks",
        "get_new_blocks",
    ]


def test_every_step_keeps_the_pool_invariants_and_holds_equal_to_tables() -> None:
    system = System(9, block_size=4, groups=(KVGroup(), KVGroup()), hash_block_size=2)
    actions: list[RequestAction] = [
        Admit("a", (1, 2, 3, 4, 5, 6)),
        Compute("a", cache_partial=True),
        Admit("b", (1, 2, 3, 4, 5, 6, 7)),
        Append("a", (8, 8)),
        Compute("a"),
        Compute("b"),
        Preempt("a"),
        Resume("a"),
        Finish("b"),
        Finish("a"),
    ]
    for action in actions:
        system(action)
        assert invariants_hold(system.pool), action
        assert holds_match_tables(system.pool, system.manager), action
    assert system(ResetCache()) is True


def test_holds_match_tables_sees_a_leaked_reference() -> None:
    system = System(6)
    system.served("a", (1, 2, 3))
    leaked = replace(system.manager, requests={})
    assert not holds_match_tables(system.pool, leaked)
