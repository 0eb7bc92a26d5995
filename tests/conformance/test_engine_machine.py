"""The engine machine: an engine driven through its own scheduler, the suite playing the
clients and the model. The toy scheduler (``toy_engine``) passes; each planted fault in it is
caught on seeds 1-3 with a shrunk client/model sequence that replays; each check of the
machine catches a batch that breaks it; data a driver does not show is not checked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from kvpool.conformance import api
from kvpool.conformance.cli import main
from kvpool.conformance.machines.engine.actions import Abort, Arrive, RunStep
from kvpool.conformance.machines.engine.command import properties_table
from kvpool.conformance.machines.engine.command import replay as replay_command
from kvpool.conformance.machines.engine.driver_check import driver_problems
from kvpool.conformance.machines.engine.engine_run import EngineRun
from kvpool.conformance.machines.engine.runner import ON_ENGINE, replay_engine, run_engine
from kvpool.conformance.machines.engine.trace_file import (
    EngineTrace,
    read_engine_trace,
    replay_engine_trace,
    write_engine_trace,
)
from kvpool.conformance.machines.pool.lockstep import Nonconformance, RunRecord
from kvpool.conformance.machines.pool.runner import LevelResult
from kvpool.conformance.machines.pool.signature import signature
from rich.console import Console
from toy_driver import ToyDriver  # pytest puts this folder on sys.path
from toy_faults import CAUGHT_BY

DOCS = Path(__file__).resolve().parents[2] / "docs"


def run(factory: api.EngineDriverFactory, seed: int, examples: int = 60) -> LevelResult:
    return run_engine(factory, max_examples=examples, steps=40, seed=seed, max_blocks=12)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_toy_scheduler_passes_and_every_shown_property_is_judged(seed: int) -> None:
    result = run(ToyDriver, seed)
    assert result.passed, result.failure
    judged = result.record.properties
    for name in ("append-only", "own-contents", "write-guard", "refcounts-match-tables",
                 "idle-pool-free", "computes-last-token"):  # fmt: skip
        assert judged[name] > 0, name
    # the clients and the model reached what the properties are about
    assert result.record.situations["hit"] > 0
    assert result.record.situations["preempted"] > 0
    assert {"arrive", "step", "abort", "flush"} <= set(result.record.operations)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("fault", list(CAUGHT_BY), ids=lambda f: f.fault)
def test_a_planted_fault_in_the_toy_scheduler_is_caught_shrunk(
    fault: type[ToyDriver], seed: int, tmp_path: Path
) -> None:
    result = run(fault, seed)
    failure = result.failure
    assert failure is not None
    assert f"property '{CAUGHT_BY[fault]}' broken" in failure.message
    assert 2 <= len(failure.trace) <= 10, failure.trace  # shrunk to a few client/model actions
    # the shrunk sequence is a trace that replays: it still fails, and passes once fixed
    trace = EngineTrace("toy_faults", failure.config, failure.trace, failure.message, seed)
    read = read_engine_trace(write_engine_trace(trace, tmp_path))
    assert read == trace
    found = replay_engine_trace(read, fault)
    assert found is not None and signature(found) == signature(failure.message)
    assert replay_engine_trace(read, ToyDriver) is None


def test_the_toy_driver_takes_at_most_40_lines_and_the_extension_page_shows_it() -> None:
    source = (Path(__file__).with_name("toy_driver.py")).read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 40
    page = (DOCS / "tutorial" / "extension-api.md").read_text(encoding="utf-8")
    driver = source[source.index("class ToyDriver") :]
    assert driver in page, "the extension-API page shows the toy driver as the tests run it"


# --- each check of the machine catches a batch that breaks it ----------------------------


class Scripted:
    """A driver replaying planned batches (no scheduler at all): each check's planted
    fault. Requests are ``r1``... with the prompts the test sends."""

    name = "scripted"

    def __init__(
        self, batches: Sequence[api.Batch], capabilities: frozenset[str], free: int = 7
    ) -> None:
        self.batches = list(batches)
        self.capabilities = capabilities
        self.free = free

    def submit(self, request: api.Submission) -> None:
        pass

    def step(self) -> api.Batch:
        return self.batches.pop(0) if self.batches else api.Batch()

    def report(self, results: Sequence[api.Sampled]) -> None:
        pass

    def free_count(self) -> int:
        return self.free

    def abort(self, request_id: str) -> None:
        pass


def judge(
    batches: Sequence[api.Batch],
    actions: Sequence[object],
    also: frozenset[str] = frozenset(),
    free: int = 7,
) -> str | None:
    """What the machine finds when an engine plans ``batches`` for ``actions`` (an engine
    of 8 blocks of 2 tokens, showing its tables and ``also``)."""
    capabilities = frozenset({"tables"}) | also
    found, _ = replay_engine(
        lambda _: Scripted(batches, capabilities, free), api.EngineSetup(8, 2), list(actions), False
    )
    return found


S = api.ScheduledRequest
PROMPT = Arrive("r1", (1, 2, 3, 4, 1), max_new_tokens=3)


def test_a_hit_on_a_block_holding_other_tokens_breaks_own_contents() -> None:
    other = Arrive("r2", (2, 2, 3, 4, 1), max_new_tokens=1)
    batches = [api.Batch((S("r2", 0, 5, ((1, 2, 3),)),)), api.Batch((S("r1", 4, 1, ((1, 2, 4),)),))]
    found = judge(batches, [other, RunStep(), PROMPT, RunStep()])
    assert found is not None and "property 'own-contents' broken" in found


def test_a_table_entry_changed_without_a_copy_breaks_append_only() -> None:
    batches = [api.Batch((S("r1", 0, 5, ((1, 2, 3),)),)), api.Batch((S("r1", 5, 1, ((1, 4, 3),)),))]
    found = judge(batches, [PROMPT, RunStep(), RunStep()])
    assert found is not None and "property 'append-only' broken" in found


def test_an_entry_moving_with_its_copied_data_keeps_append_only() -> None:
    copied = api.Batch((S("r1", 5, 1, ((1, 2, 4),)),), copies=((3, 4),))
    batches = [api.Batch((S("r1", 0, 5, ((1, 2, 3),)),)), copied]
    assert judge(batches, [PROMPT, RunStep(), RunStep()]) is None


def test_a_swap_is_let_pass_only_to_a_block_written_for_the_same_prefix() -> None:
    twin = Arrive("r2", (1, 2, 3, 4, 2), max_new_tokens=3)
    first = api.Batch((S("r1", 0, 5, ((1, 2, 3),)), S("r2", 0, 5, ((4, 5, 6),))))
    same = api.Batch((S("r2", 5, 1, ((1, 2, 6),)),))  # r1 wrote 1 and 2 with r2's tokens
    actions = [PROMPT, twin, RunStep(), RunStep()]
    assert judge([first, same], actions, also=frozenset({"swaps_in_cached"})) is None
    assert judge([first, same], actions) is not None  # not declared: append-only
    stranger = Arrive("r2", (9, 2, 3, 4, 2), max_new_tokens=3)
    found = judge(
        [first, same], [PROMPT, stranger, RunStep(), RunStep()], also=frozenset({"swaps_in_cached"})
    )
    assert found is not None and "property 'append-only' broken" in found


class Counted(Scripted):
    """:class:`Scripted` showing ref counts: each batch comes with the counts after it."""

    def __init__(
        self, planned: Sequence[tuple[api.Batch, tuple[int, ...]]], also: frozenset[str]
    ) -> None:
        super().__init__([b for b, _ in planned], frozenset({"tables", "ref_counts"}) | also)
        self.counts = [c for _, c in planned]
        self.now = (0,) * 8

    def step(self) -> api.Batch:
        if self.counts:
            self.now = self.counts.pop(0)
        return super().step()

    def ref_counts(self) -> tuple[int, ...]:
        return self.now


def counted(
    planned: Sequence[tuple[api.Batch, tuple[int, ...]]],
    actions: Sequence[object],
    also: frozenset[str] = frozenset(),
) -> str | None:
    """What the machine finds when an engine plans ``planned`` (with its ref counts)."""
    found, _ = replay_engine(
        lambda _: Counted(planned, also), api.EngineSetup(8, 2), list(actions), False
    )
    return found


def test_keys_within_pass_lets_pass_only_a_write_read_by_requests_of_the_same_batch() -> None:
    twin = Arrive("r2", (1, 2, 3, 4, 2), max_new_tokens=3)
    both = api.Batch((S("r1", 0, 5, ((1, 2, 3),)), S("r2", 4, 1, ((1, 2, 4),))))
    planned = [(both, (0, 2, 2, 1, 1, 0, 0, 0))]
    actions = [PROMPT, twin, RunStep()]
    declared = frozenset({"keys_within_pass"})
    assert counted(planned, actions, declared) is None
    found = counted(planned, actions)
    assert found is not None and "property 'write-guard' broken" in found
    # the reader started in an earlier batch: its block is written under it, declared or not
    first = api.Batch((S("r2", 0, 5, ((1, 2, 3),)),))
    later = api.Batch((S("r1", 0, 5, ((1, 2, 4),)),))
    planned = [(first, (0, 1, 1, 1, 0, 0, 0, 0)), (later, (0, 2, 2, 1, 1, 0, 0, 0))]
    found = counted(planned, [twin, RunStep(), PROMPT, RunStep()], declared)
    assert found is not None and "property 'write-guard' broken" in found


def test_a_hit_covering_the_whole_prompt_breaks_computes_last_token() -> None:
    first = Arrive("r2", (1, 2, 3, 4), max_new_tokens=1)
    again = Arrive("r3", (1, 2, 3, 4), max_new_tokens=1)
    batches = [api.Batch((S("r2", 0, 4, ((1, 2),)),)), api.Batch((S("r3", 4, 0, ((1, 2),)),))]
    found = judge(batches, [first, RunStep(), again, RunStep()])
    assert found is not None and "property 'computes-last-token' broken" in found


def test_scheduling_a_request_that_is_not_live_is_a_finding() -> None:
    batches = [api.Batch((S("r9", 0, 1, ((1,),)),))]
    found = judge(batches, [PROMPT, RunStep()])
    assert found is not None and "'r9', which is not live" in found
    aborted = [api.Batch(), api.Batch((S("r1", 0, 5, ((1, 2, 3),)),))]
    found = judge(aborted, [PROMPT, RunStep(), Abort("r1"), RunStep()], also=frozenset({"abort"}))
    assert found is not None and "which is not live" in found


def test_blocks_not_given_back_when_idle_break_idle_pool_free() -> None:
    batches = [api.Batch((S("r1", 0, 5, ((1, 2, 3),)),))]
    stop = Arrive("r1", (1, 2, 3, 4, 1), max_new_tokens=1)
    assert judge(batches, [stop, RunStep()], also=frozenset({"free_count"})) is None
    found = judge(batches, [stop, RunStep()], also=frozenset({"free_count"}), free=4)
    assert found is not None and "property 'idle-pool-free' broken" in found


def test_a_property_without_the_data_it_needs_is_not_checked() -> None:
    record = RunRecord()
    batches = [api.Batch((S("r1", 0, 5),))]
    engine = EngineRun(lambda _: Scripted(batches, frozenset()), api.EngineSetup(8, 2), record)
    engine.apply(PROMPT)
    engine.apply(RunStep())
    assert record.properties["computes-last-token"] == 1
    for name in ("own-contents", "append-only", "idle-pool-free", "refcounts-match-tables"):
        assert record.properties[name] == 0, name


def test_a_driver_lacking_what_it_declares_is_a_usage_error() -> None:
    class Declares(ToyDriver):
        capabilities = frozenset({"tables", "events", "teleport"})

    problems = driver_problems(Declares(api.EngineSetup(8, 2)))
    assert any("'events' but has no method drain_events()" in p for p in problems)
    assert any("unknown capabilities ['teleport']" in p for p in problems)
    assert driver_problems(ToyDriver(api.EngineSetup(8, 2))) == []
    result = CliRunner().invoke(
        main, ["conform", "--machine", "engine", "--target", "test_engine_machine:BadDriver"]
    )
    assert result.exit_code == 2, result.output
    assert "is not an engine driver" in result.output


class Chained(Scripted):
    """A scripted engine publishing one stored sequence of three pages, A, B then C, whose
    cache holds each after the one before (its ``event_parents``); ``named`` is the parent
    the stream gives C."""

    def __init__(
        self, batches: Sequence[api.Batch], capabilities: frozenset[str], named: bytes | None
    ) -> None:
        super().__init__(batches, capabilities)
        self.events: list[api.BlockStored] = [
            api.BlockStored((b"A" * 8, b"B" * 8), None, 0, 2, 4),
            api.BlockStored((b"C" * 8,), named, 0, 2, 2),
        ]

    def drain_events(self) -> list[api.BlockStored]:
        taken, self.events = self.events, []
        return taken

    def event_parents(self) -> api.EventParents:
        return {(0, b"A" * 8): None, (0, b"B" * 8): b"A" * 8, (0, b"C" * 8): b"B" * 8}


@pytest.mark.parametrize("shown", [True, False], ids=["chain shown", "chain not shown"])
def test_a_stored_page_naming_a_parent_other_than_the_cache_holds_breaks_the_chain(
    shown: bool,
) -> None:
    """The engine machine reads the chain only where the driver declares it: a stream
    naming for C the page one too far back, A (a hash the consumer holds, so
    ``events-parent-known`` passes), is caught then, and not judged otherwise."""
    capabilities = frozenset({"events", "event_parents"} if shown else {"events"})
    batches = [api.Batch((S("r1", 0, 5, ((1, 2, 3),)),))]
    actions = [PROMPT, RunStep()]

    def found(named: bytes | None) -> tuple[str | None, RunRecord]:
        record = RunRecord()
        engine = EngineRun(
            lambda _: Chained(batches, capabilities, named), api.EngineSetup(8, 2), record, "count"
        )
        try:
            for action in actions:
                engine.apply(action)
        except Nonconformance as exc:  # the machine's finding
            return str(exc), record
        return None, record

    broken, _ = found(b"A" * 8)
    kept, record = found(b"B" * 8)
    assert kept is None
    if shown:
        assert broken is not None and "property 'events-parent-chain' broken" in broken, broken
        assert record.properties["events-parent-chain"] > 0
    else:
        assert broken is None
        assert record.properties["events-parent-chain"] == 0
    assert driver_problems(Chained(batches, frozenset({"event_parents"}), None)) == [
        "declares 'event_parents' without 'events' (the chain judges events)"
    ]


def chain_row(capabilities: set[str], evaluations: int) -> str:
    """The ``events-parent-chain`` row of the engine machine's properties table."""
    record = RunRecord()
    record.properties.update({"events-parent-known": 3, "events-parent-chain": evaluations})
    console = Console(width=120, record=True)
    console.print(
        properties_table(LevelResult(ON_ENGINE, record, 0.1, ()), frozenset(capabilities))
    )
    rows = console.export_text().splitlines()
    return next((line for line in rows if "events-parent-chain" in line), "")


def test_the_chain_of_a_driver_publishing_events_without_showing_it_is_not_checked() -> None:
    assert "not checked (the engine does not show its cache's chain)" in chain_row({"events"}, 0)
    assert "5" in chain_row({"events", "event_parents"}, 5)
    assert "not checked" not in chain_row({"events", "event_parents"}, 5)
    assert chain_row(set(), 0) == ""  # no events: no stream properties at all


class BadDriver(ToyDriver):
    capabilities = frozenset({"tables", "events"})


# --- the command line ------------------------------------------------------------------


def test_conform_runs_the_engine_machine_and_says_what_it_did_not_check(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["conform", "--machine", "engine", "--target", "toy_driver:ToyDriver", "--seed", "1",
         "-n", "20", "--trace-dir", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "engine/scheduler" in result.output and "every run passed" in result.output
    assert "hit-keys" in result.output and "not checked" in result.output


def test_conform_exits_1_on_a_fault_and_its_trace_replays(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["conform", "--machine", "engine", "--target", "toy_faults:SaltBlind", "--seed", "1",
         "-n", "40", "--max-findings", "1", "--trace-dir", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "Shrunk client/model sequence" in result.output
    (trace,) = tmp_path.glob("*.engine.itf.json")
    (test,) = tmp_path.glob("test_*.py")
    assert "toy_faults:SaltBlind" in test.read_text(encoding="utf-8")
    replayed = CliRunner().invoke(replay_command, [str(trace), "--target", "toy_faults:SaltBlind"])
    assert replayed.exit_code == 1 and "own-contents" in replayed.output
    fixed = CliRunner().invoke(replay_command, [str(trace), "--target", "toy_driver:ToyDriver"])
    assert fixed.exit_code == 0, fixed.output
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    bad = CliRunner().invoke(
        replay_command, [str(tmp_path / "bad.json"), "--target", "toy_driver:ToyDriver"]
    )
    assert bad.exit_code == 2 and "not an engine trace" in bad.output
    via_kvpool = CliRunner().invoke(main, ["replay", str(trace), "-t", "toy_faults:SaltBlind"])
    assert via_kvpool.exit_code == 1 and "own-contents" in via_kvpool.output
    passing = CliRunner().invoke(main, ["replay", str(trace), "-t", "toy_driver:ToyDriver"])
    assert passing.exit_code == 0, passing.output
    unnamed = CliRunner().invoke(main, ["replay", str(trace)])  # a file never chooses code
    assert unnamed.exit_code == 2 and "--target toy_faults:SaltBlind" in unnamed.output
    shown = CliRunner().invoke(main, ["show", str(trace)])
    assert shown.exit_code == 0 and "<- fails here" in shown.output
    assert "own-contents" in shown.output and "engine built as EngineSetup(" in shown.output


def test_options_the_engine_machine_does_not_take_are_refused() -> None:
    for extra in (["--level", "safety"], ["--manager", "none"], ["--profile", "seed"]):
        result = CliRunner().invoke(
            main, ["conform", "--machine", "engine", "--target", "toy_driver:ToyDriver", *extra]
        )
        assert result.exit_code == 2, result.output
        assert "not taken by the engine machine" in result.output


def test_expect_files_work_at_the_engine_machine(tmp_path: Path) -> None:
    expect = tmp_path / "expect.toml"
    expect.write_text(
        '[[expected]]\nrule = "own-contents"\nsituation = "keys leave the salt out"\n'
        'upstream = "https://example.invalid/toy"\n',
        encoding="utf-8",
    )
    args = ["conform", "--machine", "engine", "--seed", "1", "-n", "40", "--expect", str(expect),
            "--trace-dir", str(tmp_path)]  # fmt: skip
    known = CliRunner().invoke(main, [*args, "--target", "toy_faults:SaltBlind"])
    assert known.exit_code == 0, known.output
    assert "known finding (own-contents): keys leave the salt out" in known.output
    assert not list(tmp_path.glob("*.engine.itf.json"))  # a known finding writes no trace
    fixed = CliRunner().invoke(main, [*args, "--target", "toy_driver:ToyDriver"])
    assert fixed.exit_code == 1 and "A known finding no longer shows up" in fixed.output
    other = CliRunner().invoke(main, [*args, "--target", "toy_faults:LeakOnPreempt"])
    assert other.exit_code == 1 and "refcounts-match-tables" in other.output
    expect.write_text("rule =", encoding="utf-8")
    bad = CliRunner().invoke(main, [*args, "--target", "toy_driver:ToyDriver"])
    assert bad.exit_code == 2 and "not valid TOML" in bad.output
