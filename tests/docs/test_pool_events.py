"""The event fields the ``take_events`` page documents are exactly the ones the suite
reads: each event is fed to the reader as an object that records every attribute asked
of it, and the recorded names must be the documented ones, event by event."""

from __future__ import annotations

from typing import Any

import pytest
from kvpool.conformance.engines.vllm_api.events import EventReader
from kvpool.conformance.tools.reference import pool_events
from kvpool.conformance.tools.reference.pool_events import EVENT_FIELDS
from kvpool.spec import AllBlocksCleared, BlockRemoved, BlockStored

#: A value for every field the table documents (hashes as bytes, group 2).
VALUES: dict[str, Any] = {
    "block_hashes": [b"\x01" * 8, b"\x02" * 8],
    "parent_block_hash": b"\x00" * 8,
    "block_size": 4,
    "token_ids": list(range(8)),
    "group_idx": 2,
}


def recording_event(name: str, fields: dict[str, Any], asked: list[str]) -> Any:
    """An event of class ``name`` with ``fields``; every attribute asked of it goes to
    ``asked`` (a missing one raises ``AttributeError``, as on a real event)."""

    def lookup(self: object, attribute: str) -> Any:
        asked.append(attribute)
        if attribute in fields:
            return fields[attribute]
        raise AttributeError(attribute)

    return type(name, (), {"__getattr__": lookup})()


def reads(name: str, fields: dict[str, Any]) -> tuple[list[str], list[Any]]:
    asked: list[str] = []
    events = EventReader().spec_events(recording_event(name, fields, asked), None)
    return asked, events


def undocumented_reads() -> list[str]:
    """``event.field`` for every field the reader reads that the table leaves out, and
    every documented field it never reads."""
    out = []
    for name, documented in EVENT_FIELDS.items():
        names = {field for field, _, _ in documented}
        asked, _ = reads(name, {n: VALUES[n] for n in names})
        out += [f"{name}.{a} (read, not documented)" for a in sorted(set(asked) - names)]
        out += [f"{name}.{n} (documented, not read)" for n in sorted(names - set(asked))]
    return out


def test_the_documented_fields_are_exactly_the_ones_read() -> None:
    assert not undocumented_reads()


def test_a_field_left_out_of_the_table_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's first version listed only ``block_hashes`` for ``BlockRemoved``."""
    only_hashes = tuple(f for f in EVENT_FIELDS["BlockRemoved"] if f[0] == "block_hashes")
    monkeypatch.setitem(pool_events.EVENT_FIELDS, "BlockRemoved", only_hashes)
    assert undocumented_reads() == ["BlockRemoved.group_idx (read, not documented)"]


def test_the_fields_become_the_spec_events_the_page_says() -> None:
    _, stored = reads("BlockStored", VALUES)
    assert stored == [
        BlockStored(
            block_hashes=(b"\x01" * 8, b"\x02" * 8),
            parent_block_hash=b"\x00" * 8,
            group_id=2,
            block_size=4,
            num_tokens=8,  # len(token_ids): only the length is read
        )
    ]
    _, removed = reads("BlockRemoved", {"block_hashes": [b"\x01" * 8], "group_idx": 2})
    assert removed == [BlockRemoved(b"\x01" * 8, 2)]
    # a group_idx left None counts as group 0, as the page warns
    _, removed = reads("BlockRemoved", {"block_hashes": [b"\x01" * 8], "group_idx": None})
    assert removed == [BlockRemoved(b"\x01" * 8, 0)]
    _, cleared = reads("AllBlocksCleared", {})
    assert cleared == [AllBlocksCleared()]


def test_events_are_recognised_by_class_name_alone() -> None:
    with pytest.raises(TypeError, match="unknown KV event type BlockEvicted"):
        reads("BlockEvicted", VALUES)
    assert "type(event).__name__" in pool_events.RECOGNISED_BY
