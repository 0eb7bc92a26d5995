"""Dynamo's radix tree in process (``--consumer dynamo``): the translation keeps a count-
contract stream without duplicates exact; the behaviours a finding rests on, pinned on
the real tree; vLLM 0.33.0's stream loses a duplicate copy's prefix, shrunk to a few
actions. Without the extra these tests skip, saying which install they need."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "dynamo._core",
    reason="the dynamo consumer needs Dynamo's router core: "
    "pip install -e '.[dynamo]' (ai-dynamo-runtime==1.6.1)",
)

from click.testing import CliRunner
from kvpool.conformance.cli import main
from kvpool.conformance.consumers.dynamo import DynamoConsumer, external_hash
from kvpool.conformance.consumers.judge import StreamJudge
from kvpool.spec import AllBlocksCleared, BlockRemoved, BlockStored

A, B, C = b"a" * 32, b"b" * 32, b"c" * 32


def stored(*hashes: bytes, parent: bytes | None = None, group: int = 0) -> BlockStored:
    return BlockStored(hashes, parent, group, 16, 16 * len(hashes))


def test_hashes_map_to_distinct_external_hashes() -> None:
    assert external_hash((7).to_bytes(8, "big")) == 7  # an integer on vLLM's wire
    assert len({external_hash(h) for h in (A, B, C, A[:8], b"")}) == 5


def test_a_chained_stream_without_duplicates_is_kept_exactly() -> None:
    tree = DynamoConsumer()
    tree.apply([stored(A, B), stored(C, parent=B), stored(A, group=1)])
    assert tree.held_blocks([A, B, C], 0) == 3
    assert tree.held_blocks([A, C], 0) == 1
    assert tree.held_blocks([A, B], 1) == 1  # groups kept apart
    tree.apply([BlockRemoved(C, 0)])
    assert tree.held_blocks([A, B, C], 0) == 2
    assert set(tree.residency()) == {(0, A), (0, B), (1, A)}
    tree.apply([AllBlocksCleared()])
    assert tree.held_blocks([A, B], 0) == 0 and tree.held_blocks([A], 1) == 0


def test_two_copies_and_one_removal_lose_the_prefix() -> None:
    """vLLM publishes one BlockStored per physical copy; the tree keeps one node, and the
    first removal drops it (and the blocks after it) though a copy is still cached."""
    tree = DynamoConsumer()
    tree.apply([stored(A, B), stored(A), BlockRemoved(A, 0)])
    assert tree.held_blocks([A, B], 0) == 0


def test_a_store_under_an_unknown_parent_is_refused_and_counted() -> None:
    tree = DynamoConsumer()
    tree.apply([stored(B, parent=A)])
    assert tree.held_blocks([A, B], 0) == 0
    assert sum(tree.refused.values()) == 1


def test_the_judge_finds_the_lost_copy_and_blames_the_router() -> None:
    judge = StreamJudge("dynamo")
    events = [stored(A, B), stored(A), BlockRemoved(A, 0)]
    assert judge.feed(events, {(0, A): 1, (0, B): 1}) == ()  # the count replay holds
    lost = judge.routes_on_residency({(0, A): 1, (0, B): 1})
    assert [v.property for v in lost] == ["router-copies"]
    assert "the pool serves 2 leading block(s); the dynamo consumer believes" in lost[0].message


def test_vllm_0_33_loses_dynamo_a_duplicate_copy(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "conform",
            "--target",
            "vllm==0.33.0",
            "--level",
            "events",
            "--machine",
            "pool",
            "--consumer",
            "dynamo",
            "--seed",
            "1",
            "--max-examples",
            "100",
            "--no-coverage",
            "--trace-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 1, result.output
    out = result.output
    assert "property 'router-copies' broken for the dynamo consumer" in out, out
    finding = out[out.index("property 'router-copies'") :]
    shrunk = int(finding.split("Shrunk action sequence (")[1].split(" ")[0])
    assert shrunk <= 6, finding


STREAMS = Path(__file__).parent / "stream" / "data"


def test_the_monitor_judges_dynamo_on_a_recorded_twins_stream() -> None:
    """vLLM 0.33.0's own publisher, 16 requests with two twins (`kvpool publish --twins 2`,
    saved by `kvpool monitor --save`): the count model holds every copy; Dynamo's tree,
    fed the same stream, loses prefixes the worker still holds."""
    recording = str(STREAMS / "vllm-0.33.0-twins.jsonl")
    counted = CliRunner().invoke(main, ["monitor", "--consumer", "count", recording])
    assert counted.exit_code == 0, counted.output
    judged = CliRunner().invoke(main, ["monitor", "--consumer", "dynamo", recording])
    assert judged.exit_code == 1, judged.output
    assert "violation(s) of router-copies" in judged.output
    # a per-copy loss stays one while it lasts: not reported again as router-recall
    assert "violation(s) of router-recall" not in judged.output
    assert "the dynamo consumer believes the worker holds" in judged.output
