"""The call an operation makes on a pool with vLLM's ``BlockPool`` API, as data.

A :class:`PoolCall` says which method is called (on the pool under test or on its peer),
which field of the action becomes which argument and in what form (a block id as the
pool's block object, the request's hashes as a request object, ...), which optional
keyword arguments the pool may take, and what the result is read as. It also carries the
words the docs' reference shows for each argument. The vLLM-API adapter, the surface
check, the standalone vectors runner (through :func:`call_table`) and the reference page
all read it; none of them names an operation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: How an action's field is handed to the pool:
#:
#: - ``value``: as it is (an int, a flag);
#: - ``hash``: bytes, as they are (a trace or vector writes them in hex);
#: - ``list`` / ``set``: a tuple of the action as a list or a set;
#: - ``block``: a block id as the pool's block object (``pool.blocks[id]``);
#: - ``blocks``: block ids as a list of the pool's block objects;
#: - ``request``: a request's chained block hashes as a request object;
#: - ``watcher``: a watcher's name as the callback the pool calls on reuse.
GivenAs = Literal["value", "hash", "list", "set", "block", "blocks", "request", "watcher"]

#: What the pool's answer is read as:
#:
#: - ``block_ids``: a list of blocks, read as their ids;
#: - ``block_ids_or_none``: the same, or ``None``;
#: - ``key_or_none``: a key (bytes) or ``None``;
#: - ``bool`` / ``int`` / ``float``: the value, as that type;
#: - ``events``: the events published since the last call;
#: - ``nothing``: no result (its return value is read only as a refusal).
ReadAs = Literal[
    "block_ids", "block_ids_or_none", "key_or_none", "bool", "int", "float", "events", "nothing"
]


@dataclass(frozen=True)
class Argument:
    """One positional argument of the call."""

    #: The pool method's parameter name.
    parameter: str
    #: The action's field it comes from.
    field: str
    given_as: GivenAs
    #: What it is and what the suite passes (the reference page's words).
    explained: str
    #: Another field of block ids, of the peer pool's blocks, appended to this one's.
    foreign: str | None = None
    #: The :class:`~..targets.vllm_api.detection.PoolApi` flag under which the pool takes
    #: these blocks as one list per KV-cache group (vLLM before 0.14's ``touch``).
    per_group: str | None = None


@dataclass(frozen=True)
class Keyword:
    """An optional keyword argument: passed only to a pool whose method takes it."""

    #: The parameter name the suite knows it by (a pool may call it otherwise: ``prepend``).
    parameter: str
    #: The action's field it comes from.
    field: str
    given_as: GivenAs
    explained: str
    #: The :class:`~..targets.vllm_api.detection.PoolApi` field saying whether the pool
    #: takes it: a bool, or the name the pool takes it under (``None``: not taken).
    api: str
    #: Passed whenever the pool takes it (else only when the action sets it: true, or not
    #: ``None``).
    always: bool = False
    #: Offered as the pseudo-operation ``method:parameter`` of a target's ``operations``
    #: (``free_blocks:evict_first``), not through its ``takes``.
    offered_as_operation: bool = False


@dataclass(frozen=True)
class PoolCall:
    """The pool-facing call behind one operation."""

    method: str
    arguments: tuple[Argument, ...]
    read_as: ReadAs
    #: What the suite does with the result (the reference page's words).
    returns: str
    keywords: tuple[Keyword, ...] = ()
    #: Called on the peer pool, not on the pool under test.
    on_peer: bool = False
    #: Where the call goes (the reference page's words).
    on: str = "the pool under test"

    @property
    def positional(self) -> tuple[str, ...]:
        """The positional parameter names, in order."""
        return tuple(a.parameter for a in self.arguments)

    @property
    def explained(self) -> dict[str, str]:
        """Every parameter, positional then keyword, with what the suite passes."""
        explained = {a.parameter: a.explained for a in self.arguments}
        return explained | {k.parameter: k.explained for k in self.keywords}


def is_set(value: object) -> bool:
    """Whether an optional field is set: true, or not ``None`` (an empty mask is set)."""
    return value is not None and value is not False


def keyword_parameter(keyword: Keyword, api: Any) -> str | None:
    """The name a pool read as ``api`` takes ``keyword`` under, or ``None``."""
    taken = getattr(api, keyword.api)
    if isinstance(taken, str):
        return taken
    return keyword.parameter if taken else None


def call_table(calls: dict[str, PoolCall]) -> dict[str, Any]:
    """``calls`` (operation -> call) as plain data: what a runner in any language reads
    to call a pool (``tools/vectors/pool_calls.json``; the standalone runner reads it)."""
    return {
        "operations": {
            operation: {
                "method": call.method,
                "on": "peer" if call.on_peer else "pool",
                "arguments": [
                    {"parameter": a.parameter, "field": a.field, "given_as": a.given_as}
                    | ({"foreign": a.foreign} if a.foreign else {})
                    for a in call.arguments
                ],
                "keywords": [
                    {
                        "parameter": k.parameter,
                        "field": k.field,
                        "given_as": k.given_as,
                        "always": k.always,
                    }
                    for k in call.keywords
                ],
                "read_as": call.read_as,
            }
            for operation, call in calls.items()
        }
    }
