"""Hostile input for every reader's fuzz test: raw bytes, and structured values a parser
accepts but a reader must not trust (deep nesting, huge arrays, wrong types, invalid
UTF-8, integers past 64 bits, wrong sequence widths). The folder is on sys.path."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
#: How many examples each property runs: small by default (the default test run and CI),
#: larger on request: ``KVPOOL_READER_EXAMPLES=5000 pytest tests/readers``.
EXAMPLES = int(os.environ.get("KVPOOL_READER_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

#: A few trace files of each kind: pool vectors at each level, and a recorded finding.
SEED_TRACES = [
    ROOT / "vectors/seed/free_blocks/order-0.itf.json",
    ROOT / "vectors/seed/cache_full_blocks/robustness-0.itf.json",
    ROOT / "vectors/vllm-0.33/take_events/order-0.itf.json",
    ROOT / "vectors/seed/get_new_blocks/safety-0.itf.json",
    ROOT / "findings/vllm-0.24.0/pool-events-set-property-events-parent-known.itf.json",
    ROOT / "findings/nanovllm-npu-0.0.2/requests-manager-after-admit-invariant.itf.json",
]
#: The vectors alone (what ``kvpool vectors check`` and the standalone runner read).
SEED_VECTORS = [p for p in SEED_TRACES if "vectors" in p.parts]

# --- JSON values -------------------------------------------------------------------------


def nested(depth: int, kind: str = "list") -> Any:
    """``depth`` levels of one-item lists (or one-key dicts), built without recursion."""
    value: Any = 0
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["\ud800", "\x1b[31m", "[red]x[/red]", "x" * 5000, "-1", "Some", "None"]),
)
#: Values in the ITF shapes a trace uses, half-right: a decoder must check each.
itf_lookalikes = st.one_of(
    st.fixed_dictionaries({"#bigint": st.text(max_size=500)}),
    st.fixed_dictionaries({"#tup": st.lists(scalars, max_size=3)}),
    st.fixed_dictionaries({"#set": st.lists(scalars, max_size=3)}),
    st.fixed_dictionaries({"#map": st.lists(st.lists(scalars, max_size=3), max_size=3)}),
    st.fixed_dictionaries({"tag": st.sampled_from(["Some", "None", "Other"]), "value": scalars}),
    st.fixed_dictionaries({"#unserializable": st.sampled_from(["inf", "nan", "1e999", "x"])}),
    st.fixed_dictionaries({"operation": st.text(max_size=30)}),
)
json_values = st.recursive(
    st.one_of(scalars, itf_lookalikes),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
hostile_json = st.one_of(
    json_values,
    st.integers(1, 200).map(nested),
    st.integers(1, 200).map(lambda n: nested(n, "dict")),
    st.integers(0, 200_000).map(lambda n: [0] * n),
)


def json_text(value: Any) -> str:
    """``value`` as JSON text (NaN and lone surrogates as Python writes them)."""
    return json.dumps(value)


def node_paths(document: Any) -> list[tuple[Any, ...]]:
    """The path (keys and indices) of every node in ``document``, the root first."""
    found: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), document)]
    while stack:
        path, node = stack.pop()
        found.append(path)
        if isinstance(node, dict):
            stack.extend(((*path, k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in enumerate(node))
    return found


def at_path(document: Any, path: tuple[Any, ...], new: Any) -> Any:
    """``document`` with the node at ``path`` replaced by ``new`` (a copy)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(document, dict):
        return {**document, head: at_path(document[head], rest, new)}
    return [*document[:head], at_path(document[head], rest, new), *document[head + 1 :]]


@st.composite
def broken_documents(draw: st.DrawFn, seeds: list[Path]) -> bytes:
    """A seed file broken in one to three places (any node, each as likely), as bytes
    (sometimes cut short or not even UTF-8)."""
    document = json.loads(draw(st.sampled_from(seeds)).read_text(encoding="utf-8"))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(node_paths(document)))
        document = at_path(document, path, draw(hostile_json))
    data = json_text(document).encode("utf-8", "surrogatepass")
    return draw(st.one_of(st.just(data), mangled(data)))


def mangled(data: bytes) -> st.SearchStrategy[bytes]:
    """``data`` cut short, with bytes flipped, or with bytes that are not UTF-8 put in."""
    return st.one_of(
        st.integers(0, len(data)).map(lambda n: data[:n]),
        st.tuples(st.integers(0, max(len(data) - 1, 0)), st.binary(min_size=1, max_size=4)).map(
            lambda p: data[: p[0]] + p[1] + data[p[0] + len(p[1]) :]
        ),
        st.integers(0, len(data)).map(lambda n: data[:n] + b"\xff\xfe\x80" + data[n:]),
    )


# --- msgpack frames ----------------------------------------------------------------------


def encode(value: Any) -> bytes:
    return msgspec.msgpack.encode(value)


#: Any integer msgpack can carry.
wide = st.integers(-(2**63), 2**64 - 1)


#: Events of every kind with fields of the right and of the wrong type.
hostile_events = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared", "X"]),
        },
        optional={
            "block_hashes": st.one_of(
                st.lists(st.one_of(st.binary(max_size=40), wide)),
                st.one_of(st.none(), st.text(max_size=4), wide, st.floats()),
            ),
            "parent_block_hash": st.one_of(st.none(), st.binary(max_size=40), wide),
            "token_ids": st.one_of(st.lists(st.integers(-(2**63), 2**63 - 1)), st.text()),
            "block_size": st.one_of(st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none()),
            "medium": st.one_of(st.none(), st.text(max_size=8), wide),
            "group_idx": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text()),
            "lora_name": st.one_of(st.none(), st.text(max_size=8)),
        },
    ),
    st.lists(st.one_of(st.sampled_from(["BlockStored", "BlockRemoved"]), wide), max_size=10),
    wide,
    st.binary(max_size=8),
)
msgpack_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        wide,
        st.floats(),
        st.text(max_size=10),
        st.binary(max_size=10),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def hostile_payloads(draw: st.DrawFn) -> bytes:
    """A payload frame: a batch-shaped value with hostile parts, deep nesting, a huge
    array, an invalid UTF-8 string, an ext type, or raw bytes."""
    ts = draw(st.one_of(st.floats(), wide, msgpack_values))
    events = draw(st.one_of(st.lists(hostile_events, max_size=6), msgpack_values))
    rank = draw(st.one_of(st.integers(-1, 5000), wide, msgpack_values))
    shape = draw(st.sampled_from(["batch", "short", "long", "any"]))
    value: Any = {
        "batch": [ts, events, rank],
        "short": [ts, events],
        "long": [ts, events, rank, rank],
        "any": draw(msgpack_values),
    }[shape]
    structured = encode(value)
    return draw(
        st.one_of(
            st.just(structured),
            mangled(structured),
            st.binary(max_size=200),
            st.integers(1, 300_000).map(lambda n: b"\x91" * n + b"\x00"),
            st.integers(1, 100_000).map(lambda n: b"\x81\xa1k" * n + b"\x00"),
            st.integers(0, 300_000).map(lambda n: encode([1.0, [0] * n, 0])),
            st.just(b"\xdd\xff\xff\xff\xff"),  # an array claiming 4 billion items
            st.just(encode([1.0, []])[:-1] + b"\xa2\xff\xfe"),  # a string that is not UTF-8
            st.just(b"\x93\xcb" + b"\x00" * 8 + b"\x91\xd6\xff" + b"\xff" * 4 + b"\x00"),  # ext
        )
    )


#: Sequence frames of every width (8 and 24 are the right ones).
sequence_frames = st.one_of(
    st.binary(min_size=8, max_size=8),
    st.binary(min_size=24, max_size=24),
    st.binary(max_size=40),
)


@st.composite
def hostile_messages(draw: st.DrawFn) -> list[bytes]:
    """A multipart message: the right three frames with hostile contents, or any frames."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.lists(st.binary(max_size=30), max_size=5))
    topic = draw(st.one_of(st.just(b""), st.binary(max_size=2000)))
    return [topic, draw(sequence_frames), draw(hostile_payloads())]


def escapes(read: Callable[[], object], allowed: type[BaseException]) -> BaseException | None:
    """What ``read`` raised that is not ``allowed`` (a reader's one error), or ``None``."""
    try:
        read()
    except allowed:
        return None
    except Exception as exc:
        return exc
    return None
