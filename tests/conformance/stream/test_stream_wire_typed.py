"""The wire decoder's typed fast path decodes a batch exactly as the generic path does, on
random batches in vLLM 0.33's encoding and in the variants it leaves to the generic path
(bytes and negative hashes, array-tagged events, unknown fields, values past a bound,
deep extra keys); a fast path that dropped a field would be caught here."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import msgspec
import pytest
from kvpool.conformance.bounds import MAX_RANK
from kvpool.conformance.tools.stream import wire
from kvpool.conformance.tools.stream.wire import MalformedFrame


def random_event(rng: random.Random) -> Any:
    kind = rng.choice(["BlockStored"] * 5 + ["BlockRemoved"] * 4 + ["AllBlocksCleared"])
    if kind == "AllBlocksCleared":
        return {"type": kind}
    hashes = [rng.randrange(1 << 64) for _ in range(rng.randint(0, 4))]
    event: dict[str, Any] = {
        "type": kind,
        "block_hashes": hashes,
        "medium": rng.choice([None, "GPU", "CPU"]),
    }
    if rng.random() < 0.8:
        event["group_idx"] = rng.choice([None, 0, 1, 3])
    if kind == "BlockStored":
        event["parent_block_hash"] = rng.choice([None, rng.randrange(1 << 64)])
        event["token_ids"] = [rng.randrange(50_000) for _ in range(rng.randint(0, 32))]
        event["block_size"] = rng.choice([0, 16])
        event["lora_id"] = rng.choice([None, 3])
        event["lora_name"] = rng.choice([None, "adapter"])
        event["extra_keys"] = rng.choice(
            [None, [None] * len(hashes), [["salt", ["mm", 4]]] * len(hashes)]
        )
    return event


def variant(rng: random.Random, event: Any) -> Any:
    """An event the typed path leaves to the generic one (or one it must refuse)."""
    if not isinstance(event, dict) or "block_hashes" not in event:
        return ["AllBlocksCleared"]  # array-tagged
    event = dict(event)
    match rng.randrange(6):
        case 0:
            event["block_hashes"] = [b"\x01" * 32, *event["block_hashes"]]
        case 1:
            event["block_hashes"] = [-5, *event["block_hashes"]]
        case 2:
            event["future_field"] = [1, 2]
        case 3:
            event["extra_keys"] = [[[[["deep"]]]]]
        case 4:
            event["group_idx"] = True
        case _:
            event["medium"] = 7
    return event


def payloads(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(30):
        events = [random_event(rng) for _ in range(rng.randint(0, 6))]
        if rng.random() < 0.4 and events:
            at = rng.randrange(len(events))
            events[at] = variant(rng, events[at])
        batch: list[Any] = [rng.choice([1.5, 2]), events]
        if rng.random() < 0.7:
            batch.append(rng.choice([0, 2, MAX_RANK, MAX_RANK + 1]))
        out.append(msgspec.msgpack.encode(batch))
    return out


def generic(payload: bytes) -> wire.WireBatch | str:
    try:
        return wire._decode_generic(payload)
    except MalformedFrame as exc:
        return f"malformed: {exc}"


def compared(seed: int) -> tuple[int, int]:
    """How many of a seed's payloads the typed path took, and on how many of those it
    disagreed with the generic path."""
    taken = differ = 0
    for payload in payloads(seed):
        typed = wire._decode_typed(payload)
        if typed is not None:
            taken += 1
            differ += typed != generic(payload)
    return taken, differ


@pytest.mark.parametrize("seed", range(20))
def test_the_typed_path_decodes_as_the_generic_path(seed: int) -> None:
    taken, differ = compared(seed)
    assert differ == 0
    assert taken > 0, "the typed path took no batch: it tests nothing"


def test_a_typed_path_that_loses_the_group_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = wire._decode_typed

    def no_group(payload: bytes) -> wire.WireBatch | None:
        batch = real(payload)
        if batch is None:
            return None
        events = tuple(e._replace(group_idx=None) for e in batch.events)
        return dataclasses.replace(batch, events=events)

    monkeypatch.setattr(wire, "_decode_typed", no_group)
    assert sum(compared(seed)[1] for seed in range(5)) > 0
