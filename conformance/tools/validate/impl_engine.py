"""Our own engine for ``kvpool validate``: the spec's manager on our pool (``impl``), run
one request at a time, writing a request log and a recording of its KV events as an engine
and ``kvpool monitor --save`` would. It is the example driver of the validation page and
the target of its tests; ``--fault per-copy`` plants the fault validation exists to catch:
the stream then says only the first store and the last removal of a hash, however many
physical copies the pool holds (a stream of "logical presence").

    python -m kvpool.conformance.tools.validate.impl_engine [--fault per-copy] [--seed N]
        [--requests K] [REQUESTS] LOG RECORDING

With ``REQUESTS`` (a request log: its prompts and salts are run) it is a driver
``kvpool validate --rerun`` can start once per shrinking attempt; without, it runs ``K``
requests drawn from ``--seed``. Its clock is made up (request ``i`` sent at second ``i``,
its events received half a second later), so a run is the same file every time.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
from kvpool.spec import PoolConfig, TakeEvents, get_profile
from kvpool.spec import events as spec_events
from kvpool.spec.manager import ManagerConfig
from kvpool.spec.manager.actions import Admit, Append, Compute, Finish
from kvpool.spec.manager.state import Scheduled, block_hashes

from ...machines.events.check import taken_events
from ...machines.pool.lockstep import RunRecord
from ...machines.requests.pool_run import PoolRequestRun
from ...machines.requests.target import RequestSetup
from ...targets.loading import load_target
from ..stream.recording import FORMAT as RECORDING_FORMAT
from ..stream.recording import VERSION as RECORDING_VERSION
from .request_log import LogError, LoggedRequest, RequestLog, read_log, write_log

BLOCK_SIZE = 4
NUM_GPU_BLOCKS = 48
#: The made-up clock's start (Unix seconds).
STARTED = 1_800_000_000.0
FAULTS = ("per-copy",)


def drawn_requests(seed: int, count: int) -> tuple[LoggedRequest, ...]:
    """``count`` prompts over a few shared prefixes, some repeated exactly (a prompt
    cached whole is recomputed from its last block: a second physical copy)."""
    rng = random.Random(seed)
    bases = [
        [rng.randrange(1, 500) for _ in range(BLOCK_SIZE * rng.randint(1, 3))] for _ in range(3)
    ]
    made: list[LoggedRequest] = []
    for number in range(count):
        if made and rng.random() < 0.35:
            prompt = rng.choice(made).prompt
        else:
            tail = [rng.randrange(1, 500) for _ in range(rng.randint(0, 2 * BLOCK_SIZE))]
            prompt = tuple(rng.choice(bases) + tail)
        made.append(LoggedRequest(f"r{number + 1}", tuple(prompt)))
    return tuple(made)


def decoded_for(prompt: tuple[int, ...]) -> tuple[int, ...]:
    """The tokens this engine "generates" for a prompt (a function of it: runs repeat)."""
    return tuple((sum(prompt) * (i + 7)) % 499 + 1 for i in range(3))


class LogicalPresence:
    """The planted fault: a hash's store published only while no copy is held, its
    removal only when the last copy goes."""

    def __init__(self) -> None:
        self.copies: Counter[bytes] = Counter()

    def keep(self, event: spec_events.Event) -> spec_events.Event | None:
        if isinstance(event, spec_events.BlockStored):
            first = [h for h in event.block_hashes if self.copies[h] == 0]
            for h in event.block_hashes:
                self.copies[h] += 1
            if len(first) != len(event.block_hashes):
                return None  # a second copy: not said (a partly new store is rare: kept whole)
            return event
        if isinstance(event, spec_events.BlockRemoved):
            self.copies[event.block_hash] -= 1
            return event if self.copies[event.block_hash] == 0 else None
        self.copies.clear()
        return event


def run(
    requests: tuple[LoggedRequest, ...], fault: str | None
) -> tuple[RequestLog, list[dict[str, Any]]]:
    """Run ``requests``; the log and the recording's lines."""
    factory, _ = load_target("impl")
    profile = get_profile("seed")
    pool = PoolConfig(
        NUM_GPU_BLOCKS, enable_caching=True, hash_block_size=BLOCK_SIZE, enable_kv_cache_events=True
    )
    engine = PoolRequestRun(
        factory, profile, RequestSetup(ManagerConfig(BLOCK_SIZE), pool), RunRecord()
    )
    tokens: dict[bytes, tuple[int, ...]] = {}
    planted = LogicalPresence() if fault == "per-copy" else None
    logged: list[LoggedRequest] = []
    lines: list[dict[str, Any]] = []
    for number, asked in enumerate(requests):
        rid = asked.request_id
        decoded = asked.decoded or decoded_for(asked.prompt)
        admitted = engine.apply(Admit(rid, asked.prompt, asked.salt))
        if not isinstance(admitted, Scheduled):
            raise SystemExit(f"no room for request {rid!r}")
        engine.apply(Compute(rid))
        engine.apply(Append(rid, decoded))
        engine.apply(Compute(rid))
        state = engine.state.requests[rid]
        for index, h in enumerate(block_hashes(state, BLOCK_SIZE)):
            tokens.setdefault(h, state.tokens[index * BLOCK_SIZE : (index + 1) * BLOCK_SIZE])
        engine.apply(Finish(rid))
        taken = taken_events(engine.call(TakeEvents()).result)
        events = [e for e in taken if planted is None or planted.keep(e) is not None]
        if events:
            payload = msgspec.msgpack.encode(
                [STARTED + number + 0.5, [_wire(e, tokens) for e in events], 0]
            )
            frames = [b"", len(lines).to_bytes(8, "big"), payload]
            lines.append(
                {
                    "t": number + 0.5,
                    "via": "live",
                    "frames": [base64.b64encode(f).decode() for f in frames],
                }
            )
        logged.append(
            LoggedRequest(
                rid,
                asked.prompt,
                asked.salt,
                decoded,
                admitted.num_computed_tokens,
                STARTED + number,
                STARTED + number + 0.9,
            )
        )
    name = "impl" + (f" with the {fault} fault" if fault else "")
    return RequestLog(name, BLOCK_SIZE, NUM_GPU_BLOCKS, tuple(logged)), lines


def _wire(event: spec_events.Event, tokens: dict[bytes, tuple[int, ...]]) -> dict[str, Any]:
    if isinstance(event, spec_events.BlockStored):
        ids = [t for h in event.block_hashes for t in tokens.get(h, ())]
        return {
            "type": "BlockStored",
            "block_hashes": list(event.block_hashes),
            "parent_block_hash": event.parent_block_hash,
            "token_ids": ids,
            "block_size": event.block_size,
            "lora_id": None,
            "medium": "GPU",
            "lora_name": None,
            "group_idx": event.group_id,
        }
    if isinstance(event, spec_events.BlockRemoved):
        return {
            "type": "BlockRemoved",
            "block_hashes": [event.block_hash],
            "medium": "GPU",
            "group_idx": event.group_id,
        }
    return {"type": "AllBlocksCleared"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvpool.conformance.tools.validate.impl_engine")
    parser.add_argument("--fault", choices=FAULTS)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("paths", nargs="+", metavar="[REQUESTS] LOG RECORDING")
    args = parser.parse_args(argv)
    if len(args.paths) not in (2, 3):
        parser.error("give LOG RECORDING, or REQUESTS LOG RECORDING")
    if len(args.paths) == 3:
        try:
            requests = read_log(Path(args.paths[0])).requests
        except LogError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        requests = tuple(LoggedRequest(r.request_id, r.prompt, r.salt) for r in requests)
    else:
        requests = drawn_requests(args.seed, args.requests)
    log, lines = run(requests, args.fault)
    with Path(args.paths[-2]).open("w", encoding="utf-8") as out:
        write_log(out, log)
    with Path(args.paths[-1]).open("w", encoding="utf-8") as out:
        header = {
            "format": RECORDING_FORMAT,
            "version": RECORDING_VERSION,
            "sources": ["impl"],
            "started": STARTED,
        }
        out.write(json.dumps(header) + "\n")
        for line in lines:
            out.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
