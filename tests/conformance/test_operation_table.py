"""The operation table is the one place an operation is declared: a made-up operation
added there (with its action, its rule and a pool that has the method) is drawn inside
and outside the contract, dispatched to the pool, refused by its return value, called by
the standalone vectors runner, carried over the wire and shown on a reference page, with
nothing else changed;
and no module outside the table names an operation's draw, call shape or refusal."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from kvpool.conformance.engines.vllm_api.adapter import VllmApiTarget
from kvpool.conformance.machines.pool import draw, operations
from kvpool.conformance.machines.pool.draw_facts import Fact
from kvpool.conformance.machines.pool.levels import LEVELS
from kvpool.conformance.machines.pool.lockstep import LockstepRun, RunRecord
from kvpool.conformance.machines.pool.machine import next_action
from kvpool.conformance.machines.pool.pool_call import Argument, PoolCall, call_table
from kvpool.conformance.machines.pool.refusal import RefusedByReturn
from kvpool.conformance.machines.pool.surface import surface_problems
from kvpool.conformance.search.choices import Choices, RandomChoices
from kvpool.conformance.tools.reference.action_facts import pool_action_facts
from kvpool.conformance.tools.reference.action_pages import operation_page
from kvpool.conformance.tools.vectors import runner
from kvpool.impl import BlockPool
from kvpool.spec import (
    ALL_ACTIONS,
    NULL_BLOCK,
    Action,
    ContractViolation,
    Observation,
    PoolConfig,
    PoolState,
    Profile,
    initial_state,
)
from kvpool.spec.profile import SEED

#: The spec's dispatch (``kvpool.spec.step`` the module, not the function of that name).
step_module = importlib.import_module("kvpool.spec.step")


@dataclass(frozen=True)
class MarkBlock(Action):
    """``mark_block(block)``: a made-up operation that marks a real block."""

    operation: ClassVar[str] = "mark_block"
    block: int


def mark_block_violation(state: PoolState, action: MarkBlock) -> ContractViolation | None:
    if action.block == NULL_BLOCK:
        return ContractViolation("mark-null", "mark_block", NULL_BLOCK, "the null block")
    return None


def mark_block(state: PoolState, action: MarkBlock) -> tuple[PoolState, Observation]:
    """Mark a real block: nothing the pool shows changes, and nothing is returned."""
    return state, Observation(None, ())


def draw_mark_block(data: Choices, state: PoolState, ctx: draw.Context) -> Action:
    return MarkBlock(data.integer(1, state.num_blocks - 1, "block"))


def bad_mark_block(data: Choices, state: PoolState, ctx: draw.Context) -> Action | None:
    return MarkBlock(NULL_BLOCK)


MARK = operations.PoolOperation(
    MarkBlock,
    weight=50,  # drawn often, so that a short run meets it
    draw=draw_mark_block,
    bad_draws=(bad_mark_block,),
    needs=frozenset({Fact.CACHING}),
    refused_by_returning=(False,),
    call=PoolCall(
        "mark_block",
        (Argument("block", "block", "block", "the block to mark, from `pool.blocks`"),),
        "nothing",
        "nothing; a `False` refuses the call",
    ),
)


class MarkingPool(BlockPool):
    """Our pool with the made-up method: it refuses the null block by returning False."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.marked: list[int] = []

    def mark_block(self, block: Any) -> bool | None:
        if block.block_id == NULL_BLOCK:
            return False
        self.marked.append(block.block_id)
        return None


class MisshapenPool(BlockPool):
    def mark_block(self) -> None:  # takes no block: the suite cannot call it
        return None


PROFILE: Profile = dataclasses.replace(
    SEED, operations=SEED.operations | {"mark_block"}, refuses_by_return=True
)
CONFIG = PoolConfig(num_gpu_blocks=5, enable_caching=True, hash_block_size=1)


@pytest.fixture
def with_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    """The made-up operation in the table, and its rule in the spec's dispatch."""
    monkeypatch.setattr(operations, "POOL_OPERATIONS", (*operations.POOL_OPERATIONS, MARK))
    monkeypatch.setitem(step_module.TRANSITIONS, MarkBlock, (mark_block_violation, mark_block))


def target(pool: type[BlockPool] = MarkingPool) -> VllmApiTarget:
    return VllmApiTarget(pool, CONFIG, PROFILE)


@pytest.mark.usefixtures("with_mark")
def test_a_made_up_operation_is_drawn_in_and_out_of_contract() -> None:
    drawn: dict[str, list[Action]] = {"robustness": [], "safety": []}
    for level, found in drawn.items():
        choices = RandomChoices(f"mark {level}")
        state = initial_state(CONFIG, PROFILE)
        ctx = draw.Context(evict_first=True, peer=False)
        ops = PROFILE.operations - {"peer_get_new_blocks"}
        for _ in range(200):
            action = next_action(choices, state, ctx, ops, LEVELS[level])
            if isinstance(action, MarkBlock):
                found.append(action)
    assert any(a.block != NULL_BLOCK for a in drawn["safety"])
    assert all(a.block != NULL_BLOCK for a in drawn["safety"])
    assert MarkBlock(NULL_BLOCK) in drawn["robustness"]  # its rule broken


@pytest.mark.usefixtures("with_mark")
def test_a_made_up_operation_is_dispatched_and_refused_by_its_return_value() -> None:
    pool_target = target()
    assert "mark_block" in pool_target.operations
    assert pool_target.apply(MarkBlock(3)) == Observation(None, ())
    assert pool_target.pool.marked == [3]
    with pytest.raises(RefusedByReturn, match="mark_block returned False"):
        pool_target.apply(MarkBlock(NULL_BLOCK))
    assert "mark_block" not in target(BlockPool).operations  # a pool without the method


@pytest.mark.usefixtures("with_mark")
def test_a_made_up_operation_runs_in_lockstep_with_the_spec() -> None:
    record = RunRecord()
    level = LEVELS["robustness"]
    run = LockstepRun(lambda c, p: target(), PROFILE, level, CONFIG, record)
    choices = RandomChoices("mark lockstep")
    ctx = draw.Context(evict_first=run.evict_first, peer=False)
    for _ in range(300):
        action = next_action(choices, run.state, ctx, run.operations, level)
        if action is not None and run.can_apply(action):
            run.apply(action)  # a difference from the spec raises
    assert record.operations["mark_block"] > 0


@pytest.mark.usefixtures("with_mark")
def test_a_made_up_operations_call_shape_is_checked_before_a_run() -> None:
    problems = surface_problems(lambda c, p: target(MisshapenPool), PROFILE, CONFIG)
    assert any("mark_block cannot be called as mark_block(block)" in p for p in problems)
    assert surface_problems(lambda c, p: target(), PROFILE, CONFIG) == []


@pytest.mark.usefixtures("with_mark")
def test_the_standalone_runner_calls_a_made_up_operation_from_the_call_table() -> None:
    calls = call_table({op.name: op.call for op in operations.POOL_OPERATIONS})["operations"]
    config = {
        "num_gpu_blocks": 5,
        "enable_caching": True,
        "hash_block_size": 1,
        "enable_kv_cache_events": False,
        "peer_blocks": 0,
    }
    replayer = runner.Replayer(MarkingPool, config, calls)
    assert replayer.apply({"operation": "mark_block", "block": 2}) is None
    assert replayer.apply({"operation": "mark_block", "block": 0}) is False
    assert replayer.pool.marked == [2]


@pytest.mark.usefixtures("with_mark")
def test_a_made_up_operation_has_a_reference_page() -> None:
    page = operation_page(pool_action_facts(MarkBlock))
    assert "mark_block(block)" in page
    assert "the block to mark, from `pool.blocks`" in page
    assert "nothing; a `False` refuses the call" in page
    assert "def mark_block_violation(" in page or "mark_block_violation" in page


def test_the_runner_reads_the_call_table_the_operations_give() -> None:
    from kvpool.conformance.tools.vectors.call_table import PATH, rendered

    assert PATH.read_text(encoding="utf-8") == rendered(), (
        "regenerate: python -m kvpool.conformance.tools.vectors.call_table"
    )


def test_the_table_declares_every_action_of_the_spec_once() -> None:
    names = [op.name for op in operations.POOL_OPERATIONS]
    assert sorted(names) == sorted(a.operation for a in ALL_ACTIONS)
    assert len(set(names)) == len(names)
    assert all(op.rule == step_module.TRANSITIONS[op.action] for op in operations.POOL_OPERATIONS)


# --- no module outside the table names an operation's draw, call shape or refusal ---------

PACKAGE = Path(operations.__file__).resolve().parents[2]
OPERATIONS = frozenset(a.operation for a in ALL_ACTIONS)
ACTION_CLASSES = frozenset(a.__name__ for a in ALL_ACTIONS)
#: The table, and the modules that define what it points at (the drawers).
TABLE = {"machines/pool/operations.py", "machines/pool/draw.py"}
#: The modules that drive, check, replay or document pool calls: they read the table and
#: name no operation at all.
READERS = {
    "machines/pool/machine.py",
    "machines/pool/draw_facts.py",
    "machines/pool/surface.py",
    "machines/pool/refusal.py",
    "machines/pool/pool_call.py",
    "engines/vllm_api/adapter.py",
    "engines/vllm_api/calls.py",
    "tools/vectors/generate.py",
    "tools/vectors/runner.py",
    "tools/vectors/call_table.py",
    "tools/reference/pool_calls.py",
    "tools/reference/action_pages.py",
}
#: What a module may name for something that is not a draw, a call shape or a refusal.
ALLOWED = {
    # the adapter remembers the coarse keys a caching call gives blocks, to read the 64-bit
    # integer hashes its events publish (events, not the call)
    ("engines/vllm_api/calls.py", "CacheFullBlocks"),
    # what the adapter can observe follows from the operations the pool offers (a view,
    # not a call): lookups probe the index, events are taken, watchers fire, a peer exists
    ("engines/vllm_api/adapter.py", "get_cached_block"),
    ("engines/vllm_api/adapter.py", "take_events"),
    ("engines/vllm_api/adapter.py", "unpin_blocks"),
    ("engines/vllm_api/adapter.py", "peer_get_new_blocks"),
    # the run's header says where each inferred optional argument was found (a view of what
    # the pool offers, printed, not a call the adapter makes)
    ("engines/vllm_api/adapter.py", "free_blocks"),
    ("engines/vllm_api/adapter.py", "cache_full_blocks"),
    ("engines/vllm_api/adapter.py", "cache_partial_block"),
    # the surface check tells a pool lacking even an allocation it is no pool (and points
    # at the page that says what the blocks list holds)
    ("machines/pool/surface.py", "get_new_blocks"),
    # the take_events page lists the events a pool publishes
    ("tools/reference/action_pages.py", "take_events"),
    # a vector's config without a peer pool draws no peer allocation
    ("tools/vectors/generate.py", "peer_get_new_blocks"),
    # the proofs' obligations: the symbolic shape of each operation's arguments
    ("tools/proofs/obligations.py", "a table per operation"),
}
DRAWERS = frozenset(
    name
    for name in vars(draw)
    if name.startswith(("draw_", "bad_")) and callable(getattr(draw, name))
)


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _operation_names(node: ast.AST) -> list[str]:
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in OPERATIONS
    ]


def _per_operation_tables(tree: ast.Module) -> list[int]:
    """Lines of dict literals keyed by two or more operations: a weight, drawer, call-shape
    or refusal table of their own."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        and sum(isinstance(k, ast.Constant) and k.value in OPERATIONS for k in node.keys) >= 2
    ]


def naming_problems() -> list[str]:
    problems = []
    for module, tree in _modules():
        if module in TABLE:
            continue
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        problems += [f"{module} names the drawer {d}" for d in sorted(names & DRAWERS)]
        if (module, "a table per operation") not in ALLOWED:
            tables = _per_operation_tables(tree)
            problems += [f"{module}:{line}: a table per operation" for line in tables]
        if module in READERS:
            problems += [
                f"{module} names the operation {o!r}"
                for o in sorted(set(_operation_names(tree)))
                if (module, o) not in ALLOWED
            ]
            problems += [
                f"{module} names the action {c}"
                for c in sorted(names & ACTION_CLASSES)
                if (module, c) not in ALLOWED
            ]
    return problems


def test_no_module_outside_the_table_names_an_operations_draw_call_or_refusal() -> None:
    assert naming_problems() == []


def test_the_naming_check_catches_a_table_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = tmp_path / "machines" / "pool"
    planted.mkdir(parents=True)
    (planted / "machine.py").write_text(
        'WEIGHTS = {"get_new_blocks": 6, "free_blocks": 4}\n'
        "from .draw import draw_touch\n"
        'STATUS = frozenset({"touch"})\n'
    )
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path)
    found = naming_problems()
    assert "machines/pool/machine.py:1: a table per operation" in found
    assert "machines/pool/machine.py names the drawer draw_touch" in found
    assert "machines/pool/machine.py names the operation 'touch'" in found


@pytest.mark.usefixtures("with_mark")
def test_a_made_up_operation_is_carried_over_the_wire() -> None:
    from kvpool.conformance.wire.codec import decode_action, encode_action
    from kvpool.conformance.wire.schema import protocol_schema
    from kvpool.conformance.wire.session import pool_offers

    sent = json.loads(json.dumps(encode_action(MarkBlock(3))))
    assert sent["operation"] == "mark_block"
    assert decode_action(sent) == MarkBlock(3)
    assert "mark_block" in pool_offers()  # a program may offer it in its handshake
    assert "MarkBlock" in protocol_schema()["$defs"]  # and the schema describes it
