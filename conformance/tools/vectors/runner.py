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

    python -m kvpool.conformance.tools.vectors.runner VECTOR_DIR --pool mypkg.pool:make_pool
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import signal
import stat
import sys
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

#: The exit statuses of kvpool's one policy (``kvpool.conformance.exits``, written out
#: since this runner imports nothing from kvpool; a test keeps them equal): 0 every vector
#: passed, 1 a pool failed one (its crash, ``sys.exit`` or ``KeyboardInterrupt``
#: included), 2 a usage error or a vector it cannot read, 4 a bug of this runner (its
#: traceback printed), 130 interrupted by the user.
EXIT_PASS, EXIT_FINDING, EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 4, 130

#: Whether the user pressed Ctrl-C: a ``KeyboardInterrupt`` is then theirs, not the pool's.
_interrupted = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


class PoolRaised(Exception):
    """The pool's own code raised ``raised`` (or refused the call by its surface: a method
    it lacks, arguments it does not take): a refusal where the vector expects one, a
    failure elsewhere. Anything else raised while replaying is the runner's own (a vector
    of another shape)."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(f"{type(raised).__name__}: {raised}")
        self.raised = raised

    @property
    def ends_process(self) -> bool:
        return isinstance(self.raised, SystemExit | KeyboardInterrupt)


class Guarded:
    """The pool as the runner sees it: every method call goes through :func:`call`."""

    def __init__(self, pool: Any) -> None:
        self.unguarded = pool

    def __getattr__(self, name: str) -> Any:
        try:
            value = getattr(self.unguarded, name)
        except Exception as exc:  # the pool has no such method (or its property raised)
            raise PoolRaised(exc) from exc
        if not callable(value):
            return value
        return lambda *args, **kwargs: call(value, *args, **kwargs)


def call(method: Any, *args: Any, **kwargs: Any) -> Any:
    """``method(*args, **kwargs)``, a call into the pool: whatever it raises (``SystemExit``
    and a ``KeyboardInterrupt`` that is not the user's Ctrl-C included) is :class:`PoolRaised`."""
    try:
        return method(*args, **kwargs)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        if isinstance(exc, KeyboardInterrupt) and _interrupted:
            raise
        raise PoolRaised(exc) from exc


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
        options = {
            "enable_caching": config["enable_caching"],
            "hash_block_size": config["hash_block_size"],
            "enable_kv_cache_events": config["enable_kv_cache_events"],
        }  # read here: a vector lacking one is malformed, not a pool that failed to build

        def build(n: int) -> Any:
            return Guarded(call(factory, num_gpu_blocks=n, **options))

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
    """The JSON document of a vector file, refused (``ValueError``) if it is not a regular
    file (a FIFO, a device) or holds more than the bound: the file is opened without
    blocking, checked on its descriptor, and read to at most the bound plus one byte (the
    rule of ``kvpool.spec.files``, written out here, since this runner imports nothing from
    kvpool)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file; only regular files are read")
        data = bytearray()
        while len(data) <= MAX_VECTOR_BYTES:
            chunk = os.read(fd, MAX_VECTOR_BYTES + 1 - len(data))
            if not chunk:
                break
            data.extend(chunk)
    finally:
        os.close(fd)
    if len(data) > MAX_VECTOR_BYTES:
        raise ValueError(f"more than {MAX_VECTOR_BYTES} bytes; vectors are at most that")
    return json.loads(data.decode("utf-8"))


def run_vector(path: Path, factory: Any) -> str | None:
    """Replay one vector; ``None`` if the pool agrees, else the first difference."""
    document = read_vector(path)
    meta = document["#meta"]["kvpool"]
    try:
        replayer = Replayer(factory, meta["config"])
    except PoolRaised as exc:
        return f"building the pool: raised {exc}"
    try:
        return _replay_states(replayer, document["states"][1:], meta["level"])
    except PoolRaised as exc:  # outside an action: reading the free count or queue
        return f"reading the pool's state: raised {exc}"


def _replay_states(replayer: Replayer, states: list[Any], level: str) -> str | None:
    """The first difference of the pool's answers to ``states``' actions (``None``: none)."""
    for state in states:
        action, expected = state["action"], state["expected"]
        where = f"step {state['#meta']['index']} {action['operation']}"
        replayer.fired = []
        try:
            got = replayer.apply(action)
        except PoolRaised as exc:  # a refusal: right only if the vector expects one
            if exc.ends_process:
                return f"{where}: the pool ended the process: {exc} (never a refusal)"
            if expected["tag"] != "Refused":
                return f"{where}: raised {exc}"
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
        queue: Any = getattr(replayer.pool.unguarded, "free_block_queue", None)
        if level == "order" and hasattr(queue, "get_all_free_blocks"):
            order = [b.block_id for b in call(queue.get_all_free_blocks)]
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


#: What the runner's own code raises on a vector of another shape than it reads (a file is
#: data: a bad one is reported in one line, exit 2, never a traceback); RecursionError:
#: nested too deep. What the pool raises is never among them: it comes as PoolRaised.
MALFORMED = (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError)


def main(argv: list[str] | None = None) -> int:
    """Replay the vectors the command line names; the exit status of kvpool's policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--pool", required=True, help="module:factory of a vLLM-API pool")
    parser.add_argument("--profile", help="only the vectors of this profile")
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        return _check(args.directory, args.pool, args.profile)
    except KeyboardInterrupt:  # the user's Ctrl-C: the pool's own is a PoolRaised
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception:  # neither the pool's nor a vector's: this runner's own bug
        print("error: this is a bug in the vectors runner, not a finding", file=sys.stderr)
        traceback.print_exc()
        return EXIT_BUG
    finally:
        signal.signal(signal.SIGINT, previous)


def _check(directory: Path, pool: str, profile: str | None) -> int:
    try:
        factory = load_factory(pool)
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"error: cannot load --pool {pool}: {type(exc).__name__}: {exc}")
        return EXIT_USAGE
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the pool's module raised
        if isinstance(exc, KeyboardInterrupt) and _interrupted:
            raise
        print(f"FAIL importing --pool {pool}: raised {type(exc).__name__}: {exc}")
        return EXIT_FINDING
    passed = failed = 0
    for path in sorted(directory.rglob("*.itf.json")):
        try:
            meta = read_vector(path)["#meta"]["kvpool"]
            if profile and meta["profile"] != profile:
                continue
            problem = run_vector(path, factory)
        except MALFORMED as exc:
            print(
                f"error: cannot replay {path} (a malformed vector, or a pool of another "
                f"shape than vLLM's BlockPool API): {type(exc).__name__}: {exc}"
            )
            return EXIT_USAGE
        if problem is None:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {path.relative_to(directory)}: {problem}")
    print(f"{passed} passed, {failed} failed")
    return EXIT_FINDING if failed else EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
