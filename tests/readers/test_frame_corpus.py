"""The seed corpus of the coverage-guided campaign (`.ci/fuzz-frames`, atheris) replayed:
every input it kept decodes or is one counted MalformedFrame. The corpus reaches each
event kind and a spread of refusals, so a decoder change that lets any of them escape
fails here, in every test run, without atheris."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from frame_harness import frames_of, one_input
from kvpool.conformance.tools.stream import wire
from kvpool.conformance.tools.stream.wire import MalformedFrame, decode_batch, decode_message

CORPUS = sorted((Path(__file__).parent / "corpus" / "frames").iterdir())


@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:12] for p in CORPUS])
def test_each_corpus_input_decodes_or_is_one_malformed_frame(path: Path) -> None:
    one_input(path.read_bytes())


def _outcome(data: bytes) -> Counter[str]:
    got: Counter[str] = Counter()
    try:
        batch = (
            decode_batch(data[1:]) if data[0] % 2 == 0 else decode_message(frames_of(data)).batch
        )
    except MalformedFrame:
        got["malformed"] += 1
    else:
        got.update(e.kind for e in batch.events)
    return got


def test_the_corpus_reaches_every_event_kind_and_refusals() -> None:
    seen = sum((_outcome(p.read_bytes()) for p in CORPUS if p.stat().st_size), Counter())
    assert {"BlockStored", "BlockRemoved", "AllBlocksCleared", "malformed"} <= set(seen), seen


def test_a_planted_escape_fails_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted fault: an event decoder that raises TypeError, not MalformedFrame, on an
    event of an unknown type (as a reader that trusts its input would)."""
    original = wire._event

    def leaky(raw: object, index: int) -> wire.WireEvent:
        if isinstance(raw, dict) and raw.get("type") not in wire.KINDS:
            raise TypeError("unknown event type")
        return original(raw, index)

    monkeypatch.setattr(wire, "_event", leaky)
    escaped = 0
    for path in CORPUS:
        try:
            one_input(path.read_bytes())
        except TypeError:
            escaped += 1
    assert escaped, "no corpus input reaches an event of an unknown type"
