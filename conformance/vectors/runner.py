"""A standalone replayer of kvpool test vectors for pools with vLLM's BlockPool API.

It imports nothing from kvpool: only the standard library and the pool under test; how
each operation calls the pool it reads from ``pool_calls.json`` (data, written from
kvpool's operation table), so it has no branch per operation. It is the proof that the
vector format stands alone, and a template for a runner in another language (which reads
the vectors and that file). For each vector it builds the pool the vector names, applies
every action, and compares what the pool returns (blocks, lookups, flags, counts, usage,
keys, events, reuse watcher firings, refusals of out-of-contract actions) and its free
count after each step; for ``order`` vectors also the free queue's order when the pool
exposes it. Vectors assume the eviction order of their profile; a pool with another policy
is checked with ``kvpool vectors check``, which re-derives the expectations as it goes.

    python -m kvpool.conformance.vectors.runner VECTOR_DIR --pool mypkg.pool:make_pool
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path
from typing import Any


class Request:
    """The request fields a pool reads: the chained block hashes."""

    def __init__(self, block_hashes: list[bytes]) -> None:
        self.block_hashes = block_hashes
        self.all_token_ids: list[int] = []
        self.lora_request = None
        self.request_id = "vector"
        self.mm_features: list[Any] = []
        self.cache_salt = None


def optional(value: Any) -> Any:
    """The value inside an ITF option variant."""
    return value["value"] if value.get("tag") == "Some" else None


def hashes(values: list[str]) -> list[bytes]:
    return [bytes.fromhex(v) for v in values]


#: The call each operation makes on the pool, as data (``call_table.py`` writes it from
#: kvpool's operation table): the method, where each argument comes from in the action and
#: in what form, and what the answer is read as.
CALLS = Path(__file__).with_name("pool_calls.json")


def read_calls(path: Path = CALLS) -> dict[str, Any]:
    """Operation -> its call, from the call table at ``path``."""
    calls: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))["operations"]
    return calls


class Replayer:
    def __init__(
        self, factory: Any, config: dict[str, Any], calls: dict[str, Any] | None = None
    ) -> None:
        def build(n: int) -> Any:
            return factory(
                num_gpu_blocks=n,
                enable_caching=config["enable_caching"],
                hash_block_size=config["hash_block_size"],
                enable_kv_cache_events=config["enable_kv_cache_events"],
            )

        self.pool = build(config["num_gpu_blocks"])
        self.peer: Any = build(config["peer_blocks"]) if config["peer_blocks"] else None
        self.fired: list[list[Any]] = []
        self.calls = read_calls() if calls is None else calls

    def blocks(self, ids: list[int], pool: Any = None) -> list[Any]:
        owner = self.pool if pool is None else pool
        return [owner.blocks[i] for i in ids]

    def watcher(self, name: str) -> Any:
        return lambda block: self.fired.append([block.block_id, name])

    def given(self, given_as: str, value: Any) -> Any:
        """An action's field (as the vector writes it) in the form the pool takes."""
        if isinstance(value, dict) and "tag" in value:
            value = optional(value)
        if value is None:
            return None
        if given_as == "hash":
            return bytes.fromhex(value)
        if given_as == "blocks":
            return self.blocks(value)
        if given_as == "block":
            return self.pool.blocks[value]
        if given_as == "list":
            return list(value)
        if given_as == "set":
            return set(value)
        if given_as == "request":
            return Request(hashes(value))
        if given_as == "watcher":
            return self.watcher(value)
        return value

    def apply(self, a: dict[str, Any]) -> Any:
        op = a["operation"]
        call = self.calls.get(op)
        if call is None:
            raise ValueError(f"unknown operation {op!r}")
        arguments = []
        for argument in call["arguments"]:
            value = self.given(argument["given_as"], a[argument["field"]])
            if "foreign" in argument:
                value = value + self.blocks(a[argument["foreign"]], self.peer)
            arguments.append(value)
        keywords = {}
        for keyword in call["keywords"]:
            value = self.given(keyword["given_as"], a[keyword["field"]])
            if keyword["always"] or (value is not None and value is not False):
                keywords[keyword["parameter"]] = value
        owner = self.peer if call["on"] == "peer" else self.pool
        return read(call["read_as"], getattr(owner, call["method"])(*arguments, **keywords))


def read(read_as: str, returned: Any) -> Any:
    """The pool's answer as a vector states it: blocks by id, a key as bytes."""
    if read_as == "block_ids" or (read_as == "block_ids_or_none" and returned is not None):
        return [b.block_id for b in returned]
    if read_as == "key_or_none" and returned is not None:
        return bytes(returned)
    return returned


def event_pairs(events: Any, expected: bool) -> list[tuple[str, str]]:
    """Events as (kind, hash) pairs, one per hash, sorted: removals come in no set order."""
    pairs = []
    for event in events:
        if expected:
            kind = event["kind"]
            values = event.get("block_hashes") or (
                [event["block_hash"]] if "block_hash" in event else []
            )
        else:
            kind = type(event).__name__
            values = [bytes(h).hex() for h in getattr(event, "block_hashes", [])]
        pairs += [(kind, v) for v in values] or [(kind, "")]
    return sorted(pairs)


def same_result(expected: dict[str, Any], got: Any) -> bool:
    tag, value = expected["tag"], expected["value"]
    if tag == "Nothing":
        return got is None
    if tag in ("Bool", "Int", "Blocks"):
        return bool(got == value) and (tag != "Int" or not isinstance(got, bool))
    if tag == "Usage":
        return isinstance(got, float | int) and math.isclose(float(value["#unserializable"]), got)
    if tag == "Key":
        return isinstance(got, bytes) and got.hex() == value
    if tag == "Events":
        return event_pairs(value, True) == event_pairs(got, False)
    return False


#: The largest vector file read: the bound ``kvpool.conformance.bounds.MAX_TRACE_BYTES``
#: (written out, since this runner imports nothing from kvpool; a test keeps them equal).
MAX_VECTOR_BYTES = 20_000_000


def read_vector(path: Path) -> Any:
    """The JSON document of a vector file, refused (``ValueError``) above the size bound."""
    size = path.stat().st_size
    if size > MAX_VECTOR_BYTES:
        raise ValueError(f"{size} bytes; vectors are at most {MAX_VECTOR_BYTES}")
    return json.loads(path.read_text(encoding="utf-8"))


def run_vector(path: Path, factory: Any) -> str | None:
    """Replay one vector; ``None`` if the pool agrees, else the first difference."""
    document = read_vector(path)
    meta = document["#meta"]["kvpool"]
    replayer = Replayer(factory, meta["config"])
    for state in document["states"][1:]:
        action, expected = state["action"], state["expected"]
        where = f"step {state['#meta']['index']} {action['operation']}"
        replayer.fired = []
        try:
            got = replayer.apply(action)
        except Exception as exc:  # a refusal: right only if the vector expects one
            if expected["tag"] != "Refused":
                return f"{where}: raised {type(exc).__name__}: {exc}"
        else:
            if expected["tag"] == "Refused":
                return f"{where}: accepted, but the vector expects a refusal ({expected['value']})"
            result = expected["value"]["result"]
            if not same_result(result, got):
                return f"{where}: expected {result}, got {got!r}"
            want_fired = [f["#tup"] for f in expected["value"]["fired"]]
            if replayer.fired != want_fired:
                return f"{where}: watchers fired {replayer.fired}, expected {want_fired}"
        want_queue = state["free_queue"]
        free = replayer.pool.get_num_free_blocks()
        if free != len(want_queue):
            return f"{where}: {free} free blocks, expected {len(want_queue)}"
        queue: Any = getattr(replayer.pool, "free_block_queue", None)
        if meta["level"] == "order" and hasattr(queue, "get_all_free_blocks"):
            order = [b.block_id for b in queue.get_all_free_blocks()]
            if order != want_queue:
                return f"{where}: free queue {order}, expected {want_queue}"
    return None


def load_factory(spec: str) -> Any:
    """The pool factory ``--pool`` names (the only code this runner loads: a vector's own
    ``target`` is never imported)."""
    module, _, attr = spec.partition(":")
    found: Any = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


#: What reading a vector of another shape than this runner's raises (a file is data: a bad
#: one is reported in one line, exit 2, never a traceback); RecursionError: nested too deep.
MALFORMED = (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--pool", required=True, help="module:factory of a vLLM-API pool")
    parser.add_argument("--profile", help="only the vectors of this profile")
    args = parser.parse_args(argv)
    try:
        factory = load_factory(args.pool)
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"error: cannot load --pool {args.pool}: {type(exc).__name__}: {exc}")
        return 2
    passed = failed = 0
    for path in sorted(args.directory.rglob("*.itf.json")):
        try:
            meta = read_vector(path)["#meta"]["kvpool"]
            if args.profile and meta["profile"] != args.profile:
                continue
            problem = run_vector(path, factory)
        except MALFORMED as exc:
            print(f"error: cannot replay {path} (malformed?): {type(exc).__name__}: {exc}")
            return 2
        if problem is None:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {path.relative_to(args.directory)}: {problem}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
