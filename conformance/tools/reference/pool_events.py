"""The KV events a pool publishes through ``take_events``, field by field, as the suite
reads them back (``conformance/engines/vllm_api/events.py``): the table on the
``take_events`` page and in the events guide. A test feeds the reader events that carry
only these fields and records every attribute it touches, so a field the reader starts
to read, or stops reading, fails it until this table says so."""

from __future__ import annotations

from .markdown import code, table

#: How the suite tells the events apart.
RECOGNISED_BY = (
    "The suite recognises each event by its class name alone (`type(event).__name__`): "
    "`BlockStored`, `BlockRemoved` or `AllBlocksCleared`, from any module, dataclass, "
    "msgspec struct or plain object; an event of any other class name fails the run with "
    "`unknown KV event type NAME`. It reads the fields below by attribute and nothing else."
)

#: A hash as the suite reads it.
_HASH = (
    "bytes, or an int: vLLM's default, the low 64 bits of the hash read big-endian; the "
    "suite maps an int back to the hash it handed out"
)

#: What the suite does when an event names no group.
GROUPS = (
    "Publish `group_idx` on both events. The suite looks at the `BlockRemoved` class the "
    "pool's module uses (the name among the globals of its `get_new_blocks`): when there "
    "is one and it declares no `group_idx`, the suite reads the pool's `kv_event_queue` "
    "after every call and gives each event the group of the call that queued it (a store: "
    "the caching call's group; a removal: the group of the key the pool lost). Otherwise it "
    "reads `group_idx` from each event, and a missing or `None` one counts as group 0: an "
    "event of another group is then judged against group 0's keys, and the finding points "
    "at the wrong place."
)

#: Event class name -> (field, what it must hold, required), in the order the reader
#: reads them.
EVENT_FIELDS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "BlockStored": (
        (
            "block_hashes",
            f"the hashes stored by one caching call, in order, each without the group "
            f"suffix: {_HASH}",
            "yes",
        ),
        (
            "parent_block_hash",
            "the hash before the first stored one (same form), or `None` at the start of "
            "the request",
            "yes",
        ),
        ("block_size", "tokens per block of the caching call", "yes"),
        (
            "token_ids",
            "the tokens the stored blocks cover; only its length is read, as the spec's "
            "`num_tokens`: for `cache_full_blocks` the newly cached blocks times "
            "`block_size`, for a partial entry the tokens from the event's first hash "
            "block up to the entry's boundary",
            "yes",
        ),
        (
            "group_idx",
            "the KV-cache group of the stored keys (without it, see below)",
            "yes, unless the event classes have none",
        ),
    ),
    "BlockRemoved": (
        (
            "block_hashes",
            f"the hashes that left the prefix cache (the spec counts one removal per hash): "
            f"{_HASH}",
            "yes",
        ),
        (
            "group_idx",
            "the KV-cache group of the removed keys (without it, see below)",
            "yes, unless the event classes have none",
        ),
    ),
    "AllBlocksCleared": (
        (
            "group_idx",
            "looked up like every event's, and not used: the whole prefix cache is cleared, "
            "in every group",
            "no",
        ),
    ),
}


def event_fields_table() -> str:
    """Every field of every event, with what it holds and whether it is required."""
    rows = []
    for name, fields in EVENT_FIELDS.items():
        for field, what, required in fields:
            rows.append((code(name), code(field), what, required))
    return table(("event", "field", "what it holds", "required"), rows)


def event_fields_section() -> str:
    """The prose and the table, for the ``take_events`` page and the events guide."""
    return RECOGNISED_BY + "\n\n" + event_fields_table() + "\n" + GROUPS + "\n"
