"""vLLM's KV-event wire format, decoded without vLLM.

A publisher sends one ZMQ multipart message per batch of events:

``topic``
    the configured topic (bytes, often empty);
``sequence``
    8 bytes, an unsigned big-endian batch number counting from 0 for one publisher
    lifetime; or 24 bytes when the publisher offers snapshots (newer vLLM): the same 8
    bytes followed by a 16-byte identity of this publisher lifetime;
``payload``
    a msgpack ``KVEventBatch``: an array ``[ts, events, data_parallel_rank]`` (the rank is
    left out when unset). Each event is a tagged struct: a map with ``"type"`` naming the
    class (vLLM 0.33) or an array whose first item is the class name (the array-like
    encoding of other releases). Fields are ``BlockStored(block_hashes, parent_block_hash,
    token_ids, block_size, lora_id, medium, lora_name, extra_keys, group_idx, ...)``,
    ``BlockRemoved(block_hashes, medium, group_idx, ...)`` and ``AllBlocksCleared()``;
    fields a decoder does not know are ignored. A hash is bytes, or an integer (vLLM's
    default publishes the low 64 bits of the hash as an int).

An empty batch is a heartbeat (newer vLLM sends one every second while idle). Anything
else is malformed: :func:`decode_message` raises :class:`MalformedFrame` saying what was
wrong, never another exception, and so does a message outside the bounds of
:mod:`kvpool.conformance.bounds` (frame bytes, events per batch, hashes and token ids per
event, hash bytes, the rank, how deep the payload nests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import methodcaller
from typing import Any, Literal, NamedTuple

import msgspec
from kvpool.spec.consumer import short_hash

from ...bounds import (
    MAX_EVENTS_PER_BATCH,
    MAX_FRAME_BYTES,
    MAX_FRAME_NESTING,
    MAX_HASH_BYTES,
    MAX_HASHES_PER_EVENT,
    MAX_RANK,
    MAX_TOKENS_PER_EVENT,
    MAX_TOPIC_BYTES,
    nesting_exceeds,
)

#: Sequence frames: the plain one, and the one carrying a publisher identity.
SEQUENCE_BYTES = 8
IDENTITY_BYTES = 16
#: vLLM's replay end marker: a signed -1 in the sequence frame, empty topic and payload.
END_OF_REPLAY = (-1).to_bytes(SEQUENCE_BYTES, "big", signed=True)

EventKind = Literal["BlockStored", "BlockRemoved", "AllBlocksCleared"]
KINDS: tuple[EventKind, ...] = ("BlockStored", "BlockRemoved", "AllBlocksCleared")


class MalformedFrame(ValueError):
    """A message that is not a vLLM KV-event batch; the message says what is wrong."""


class WireEvent(NamedTuple):
    """One event as published; hashes normalized to bytes (see :func:`hash_bytes`). A
    named tuple: a busy stream makes millions of them, and a tuple is built fastest."""

    kind: EventKind
    block_hashes: tuple[bytes, ...] = ()
    parent_block_hash: bytes | None = None
    token_ids: tuple[int, ...] = ()
    block_size: int = 0
    medium: str | None = None
    group_idx: int | None = None

    def describe(self) -> str:
        """One line, hashes by their first 8 bytes in hex."""
        group = "" if self.group_idx is None else f" group {self.group_idx}"
        medium = "" if self.medium is None else f" {self.medium}"
        hashes = ", ".join(short(h) for h in self.block_hashes)
        if self.kind == "BlockStored":
            parent = short(self.parent_block_hash) if self.parent_block_hash else "none"
            return (
                f"BlockStored [{hashes}] parent {parent}{group}{medium} "
                f"({len(self.token_ids)} tokens)"
            )
        if self.kind == "BlockRemoved":
            return f"BlockRemoved [{hashes}]{group}{medium}"
        return "AllBlocksCleared"


@dataclass(frozen=True)
class WireBatch:
    ts: float
    events: tuple[WireEvent, ...]
    data_parallel_rank: int | None

    @property
    def heartbeat(self) -> bool:
        return not self.events


@dataclass(frozen=True)
class WireMessage:
    """One decoded live or replayed message."""

    topic: bytes
    sequence: int
    #: The 16-byte publisher identity of a 24-byte sequence frame, else ``None``.
    publisher: bytes | None
    batch: WireBatch


#: A hash as messages show it (one way, the spec's).
short = short_hash


def hash_bytes(value: object, what: str) -> bytes:
    """A published hash as bytes: bytes as they are, an integer as 8 big-endian bytes."""
    if type(value) is int and 0 <= value < _TWO_TO_64:  # vLLM's default: the fast path
        return value.to_bytes(SEQUENCE_BYTES, "big")
    if isinstance(value, bytes):
        if len(value) > MAX_HASH_BYTES:
            raise MalformedFrame(f"{what} of {len(value)} bytes (at most {MAX_HASH_BYTES})")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(1 << 63) <= value < (1 << 64):
            raise MalformedFrame(f"{what} {value} does not fit in 64 bits")
        return value.to_bytes(SEQUENCE_BYTES, "big", signed=value < 0)
    raise MalformedFrame(f"{what} is {type(value).__name__}, not bytes or an integer")


def parse_sequence(frame: bytes) -> tuple[int, bytes | None]:
    """The batch number and publisher identity of a sequence frame."""
    if len(frame) == SEQUENCE_BYTES:
        return int.from_bytes(frame, "big"), None
    if len(frame) == SEQUENCE_BYTES + IDENTITY_BYTES:
        return int.from_bytes(frame[:SEQUENCE_BYTES], "big"), bytes(frame[SEQUENCE_BYTES:])
    raise MalformedFrame(
        f"sequence frame of {len(frame)} bytes (expected {SEQUENCE_BYTES}, or "
        f"{SEQUENCE_BYTES + IDENTITY_BYTES} with a publisher identity)"
    )


def decode_message(frames: list[bytes]) -> WireMessage:
    """``[topic, sequence, payload]`` decoded; :class:`MalformedFrame` if it is not one."""
    if len(frames) != 3:
        raise MalformedFrame(f"{len(frames)} frames (expected topic, sequence, payload)")
    topic, sequence_frame, payload = frames
    if len(topic) > MAX_TOPIC_BYTES:
        raise MalformedFrame(f"topic frame of {len(topic)} bytes (at most {MAX_TOPIC_BYTES})")
    sequence, publisher = parse_sequence(sequence_frame)
    return WireMessage(bytes(topic), sequence, publisher, decode_batch(payload))


_DECODER = msgspec.msgpack.Decoder()
_TWO_TO_64 = 1 << 64


def decode_batch(payload: bytes) -> WireBatch:
    """A msgpack ``KVEventBatch``; :class:`MalformedFrame` names the first problem.

    A batch as vLLM 0.33 publishes it (map-tagged events with only the fields it names,
    every value of the type it states, within the bounds) is decoded by a typed decoder,
    at C speed (:func:`_decode_typed`); anything else by the generic path below, which
    accepts the same batches and names what is wrong with the others."""
    if len(payload) > MAX_FRAME_BYTES:
        raise MalformedFrame(f"payload of {len(payload)} bytes (at most {MAX_FRAME_BYTES})")
    typed = _decode_typed(payload)
    return typed if typed is not None else _decode_generic(payload)


def _decode_generic(payload: bytes) -> WireBatch:
    """Any payload of at most ``MAX_FRAME_BYTES``: a batch, or :class:`MalformedFrame`."""
    try:
        raw = _DECODER.decode(payload)
    except msgspec.DecodeError as exc:
        raise MalformedFrame(f"payload is not msgpack ({len(payload)} bytes): {exc}") from None
    except RecursionError:  # the decoder's own guard, far deeper than the bound
        raise MalformedFrame(f"payload nests deeper than {MAX_FRAME_NESTING} levels") from None
    if nesting_exceeds(raw, MAX_FRAME_NESTING):
        raise MalformedFrame(f"payload nests deeper than {MAX_FRAME_NESTING} levels")
    if not isinstance(raw, list) or not 2 <= len(raw) <= 3:
        raise MalformedFrame("payload is not a batch array [ts, events, data_parallel_rank]")
    ts, events = raw[0], raw[1]
    rank = raw[2] if len(raw) == 3 else None
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise MalformedFrame(f"batch timestamp is {type(ts).__name__}, not a number")
    if not isinstance(events, list):
        raise MalformedFrame(f"batch events are {type(events).__name__}, not an array")
    if rank is not None and (
        not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank <= MAX_RANK
    ):
        raise MalformedFrame(f"data_parallel_rank {_brief(rank)} is not a rank (0..{MAX_RANK})")
    if len(events) > MAX_EVENTS_PER_BATCH:
        raise MalformedFrame(f"{len(events)} events in a batch (at most {MAX_EVENTS_PER_BATCH})")
    decoded = tuple(_event(e, i) for i, e in enumerate(events))
    return WireBatch(float(ts), decoded, rank)


# --- the typed fast path ------------------------------------------------------------------

_Hash = int | bytes
#: What vLLM 0.33 publishes per block in ``extra_keys``: scalars and (identifier, offset)
#: pairs; anything deeper takes the generic path.
_Scalar = str | int | float | None
_ExtraKeys = list[list[_Scalar | list[_Scalar]] | None] | None


class _Stored(msgspec.Struct, tag="BlockStored", tag_field="type", forbid_unknown_fields=True):
    block_hashes: list[_Hash]
    parent_block_hash: _Hash | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: _ExtraKeys = None
    group_idx: int | None = None


class _Removed(msgspec.Struct, tag="BlockRemoved", tag_field="type", forbid_unknown_fields=True):
    block_hashes: list[_Hash]
    medium: str | None = None
    group_idx: int | None = None


class _Cleared(
    msgspec.Struct, tag="AllBlocksCleared", tag_field="type", forbid_unknown_fields=True
):
    pass


class _Batch(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    ts: float
    events: list[_Stored | _Removed | _Cleared]
    data_parallel_rank: int | None = None


_TYPED = msgspec.msgpack.Decoder(_Batch)
_CLEARED = WireEvent("AllBlocksCleared")


def _decode_typed(payload: bytes) -> WireBatch | None:
    """``payload`` decoded by the typed decoder, or ``None`` when it does not fit it, or a
    value is outside a bound (then the generic path decides, and says why)."""
    try:
        raw = _TYPED.decode(payload)
    except (msgspec.DecodeError, RecursionError):
        return None
    rank = raw.data_parallel_rank
    if len(raw.events) > MAX_EVENTS_PER_BATCH or (rank is not None and not 0 <= rank <= MAX_RANK):
        return None
    events: list[WireEvent] = []
    append, new = events.append, tuple.__new__  # (a named tuple built without its frame)
    for event in raw.events:
        if isinstance(event, _Cleared):
            append(_CLEARED)
            continue
        hashes = event.block_hashes
        if len(hashes) > MAX_HASHES_PER_EVENT:
            return None
        try:  # the typed decoder gives ints and bytes only (a bool is refused as an int)
            block_hashes = tuple(map(_EIGHT_BYTES, hashes))
        except (OverflowError, AttributeError):  # negative, or bytes: the generic path
            return None
        if isinstance(event, _Removed):
            removed = ("BlockRemoved", block_hashes, None, (), 0, event.medium, event.group_idx)
            append(new(WireEvent, removed))
            continue
        parent = event.parent_block_hash
        if (
            len(event.token_ids) > MAX_TOKENS_PER_EVENT
            or event.block_size < 0
            or (parent is not None and (type(parent) is not int or not 0 <= parent < _TWO_TO_64))
        ):
            return None
        stored = (
            "BlockStored",
            block_hashes,
            None if parent is None else _EIGHT_BYTES(parent),
            event.token_ids,
            event.block_size,
            event.medium,
            event.group_idx,
        )
        append(new(WireEvent, stored))
    return WireBatch(raw.ts, tuple(events), rank)


#: Field order of the array-like encoding, per class (only the fields read here).
_ARRAY_FIELDS: dict[str, tuple[str, ...]] = {
    "BlockStored": (
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
        "extra_keys",
        "group_idx",
    ),
    "BlockRemoved": ("block_hashes", "medium", "group_idx"),
    "AllBlocksCleared": (),
}


def _event(raw: Any, index: int) -> WireEvent:
    """One event of a batch. The checks on the path every well-formed event takes run at
    C speed where they can; a message naming the event is only written when one fails."""
    if isinstance(raw, dict):
        kind = raw.get("type")
        fields = raw
    elif isinstance(raw, list) and raw:
        kind = raw[0]
        names = _ARRAY_FIELDS.get(kind, ()) if isinstance(kind, str) else ()
        fields = dict(zip(names, raw[1:], strict=False))
    else:
        raise MalformedFrame(f"event {index} is {type(raw).__name__}, not a tagged struct")
    if kind not in KINDS:
        raise MalformedFrame(f"event {index} has unknown type {_brief(kind)}")
    if kind == "AllBlocksCleared":
        return WireEvent("AllBlocksCleared")

    def where() -> str:
        return f"event {index} ({kind})"

    hashes = fields.get("block_hashes")
    if not isinstance(hashes, list):
        raise MalformedFrame(f"{where()}: block_hashes is missing or not an array")
    if len(hashes) > MAX_HASHES_PER_EVENT:
        raise MalformedFrame(
            f"{where()}: {len(hashes)} block hashes (at most {MAX_HASHES_PER_EVENT})"
        )
    block_hashes = _hash_tuple(hashes, where)
    medium = fields.get("medium")
    if medium is not None and type(medium) is not str:
        medium = _optional(medium, str, f"{where()}: medium")
    group = fields.get("group_idx")
    if group is not None and type(group) is not int:
        group = _optional(group, int, f"{where()}: group_idx")
    if kind == "BlockRemoved":
        return WireEvent("BlockRemoved", block_hashes, medium=medium, group_idx=group)
    if "parent_block_hash" not in fields or "block_size" not in fields:
        raise MalformedFrame(f"{where()}: parent_block_hash or block_size is missing")
    parent = fields["parent_block_hash"]
    tokens = fields.get("token_ids")
    if not isinstance(tokens, list) or not _ONLY_INT.issuperset(map(type, tokens)):
        raise MalformedFrame(f"{where()}: token_ids is missing or not an array of integers")
    if len(tokens) > MAX_TOKENS_PER_EVENT:
        raise MalformedFrame(f"{where()}: {len(tokens)} token ids (at most {MAX_TOKENS_PER_EVENT})")
    size = fields["block_size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise MalformedFrame(f"{where()}: block_size {_brief(size)} is not a size")
    return WireEvent(
        "BlockStored",
        block_hashes,
        None if parent is None else hash_bytes(parent, f"{where()}: parent_block_hash"),
        tuple(tokens),
        size,
        medium,
        group,
    )


_ONLY_INT = frozenset({int})
_EIGHT_BYTES = methodcaller("to_bytes", SEQUENCE_BYTES, "big")


def _hash_tuple(values: list[Any], where: Callable[[], str]) -> tuple[bytes, ...]:
    """An event's hashes as bytes (see :func:`hash_bytes`): unsigned 64-bit integers, as
    vLLM publishes them by default, at C speed; anything else one by one."""
    if _ONLY_INT.issuperset(map(type, values)):
        try:
            return tuple(map(_EIGHT_BYTES, values))
        except OverflowError:  # a negative or a too large one: said below
            pass
    what = f"{where()}: block hash"
    return tuple(hash_bytes(h, what) for h in values)


def _optional(value: object, kind: type, what: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise MalformedFrame(f"{what} is {type(value).__name__}, not {kind.__name__}")
    return value


def _brief(value: object) -> str:
    """``value`` for a message: its repr, cut short (a hostile value may be huge)."""
    text = repr(value) if not isinstance(value, list | dict) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
