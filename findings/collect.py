"""Collect the findings of the real targets into ``findings/`` (run by hand, not by pytest):

    python findings/collect.py

Each target runs ``kvpool conform`` (pool levels and the requests machine on its pool) with
seed 1 and up to 12 distinct findings per run, then the ``events`` level under each consumer
model (``--consumer count`` and ``--consumer set``) where it publishes KV events; every
shrunk trace is kept under ``findings/TARGET/MACHINE-LEVEL-KIND.itf.json`` (events traces:
``pool-events-CONSUMER-KIND``). For a vLLM release whose KV cache manager can be driven,
the requests machine also runs its own manager (``--manager vllm``); for LMDeploy, its block
manager with the prefix trie (``--manager lmdeploy``).
``tests/test_findings.py`` replays them all, and ``docs/findings.md`` reads each one.
Engines checked at the engine machine only (SGLang: no pool or manager API) are not run
here: their ``--machine engine`` traces (``*.engine.itf.json``, kept beside the others)
are collected by hand, and the page's events columns count them.

    python findings/collect.py --manager-only

re-runs only the manager runs (``--machine requests --manager vllm``, or ``lmdeploy``) and
replaces only their traces.

    python findings/collect.py --routers-only

re-runs only the events level under each router of :data:`ROUTERS` (on
:data:`ROUTER_TARGETS`) and replaces only their traces.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kvpool.conformance.tools.reference.findings_events import (
    MANAGER_ONLY,
    engine_only,
    publishes_events,
)

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {
    "vllm==0.34.0": "vllm-0.34.0",
    "vllm==0.33.0": "vllm-0.33.0",
    "vllm==0.30.0": "vllm-0.30.0",
    "vllm==0.24.0": "vllm-0.24.0",
    "vllm==0.10.2": "vllm-0.10.2",
    "aphrodite==0.24.1": "aphrodite-0.24.1",
    "vllm-mlx": "vllm-mlx-0.6.0",
    "lmdeploy==0.18.0": "lmdeploy-0.18.0",
    "lmdeploy==0.16.0": "lmdeploy-0.16.0",
    "nanovllm": "nanovllm-npu-0.0.2",
    "nanovllm-fork": "nanovllm-fork-20260210",
    "sglang==0.4.6.post5": "sglang-0.4.6.post5",
    "sglang==0.4.6.post5,page=drawn": "sglang-0.4.6.post5-paged",
}
#: Pools whose release's own KV cache manager runs beside the spec's, with the ``--manager``
#: that names it: vLLM's ``KVCacheManager``, LMDeploy's block manager with its prefix trie.
MANAGERS = {
    "vllm-0.34.0": "vllm",
    "vllm-0.33.0": "vllm",
    "vllm-0.24.0": "vllm",
    "vllm-0.10.2": "vllm",
    "aphrodite-0.24.1": "aphrodite",
    "lmdeploy-0.18.0": "lmdeploy",
    "lmdeploy-0.16.0": "lmdeploy",
}
#: Targets checked at the events level only (their pool levels are those of a neighbour).
EVENTS_ONLY = frozenset({"vllm==0.30.0"})
#: A target's known findings with their upstream links, beside its traces: the file
#: ``kvpool conform --expect`` reads (docs/guide/expectations.md).
EXPECT_FILE = "expect.toml"
#: The consumer models the events level runs under, each one a column of the page.
CONSUMERS = ("count", "set")
#: Routers run at the events level (pool and requests machines) on these targets; their
#: findings go to the page's consumers section, not to the table of pool runs.
ROUTERS = ("dynamo", "vllm-router")
ROUTER_TARGETS = ("vllm==0.33.0",)
#: What the events level of a target that publishes no events says (exit status 2).
NO_EVENTS = "no events"
#: The engine machine's traces (``--machine engine``): kept beside a target's other traces
#: (collected by hand for now: ``kvpool conform --target T --machine engine``), replayed by
#: the engine the page names, and listed in a section of their own.
ENGINE_SUFFIX = ".engine.itf.json"


def conform(target: str, options: list[str], trace_dir: str) -> int:
    """``kvpool conform --target TARGET OPTIONS`` at seed 1, up to 12 findings; its status."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from kvpool.conformance.cli import main; main()",
            "conform",
            "--target",
            target,
            *options,
            "--seed",
            "1",
            "--max-findings",
            "12",
            "--no-coverage",
            "--trace-dir",
            trace_dir,
        ],
        check=False,
        capture_output=True,
    ).returncode


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from kvpool.conformance.machines.pool.signature import signature
    from kvpool.conformance.trace.files import read_trace

    out = ROOT / "findings"
    manager_runs_only = "--manager-only" in sys.argv[1:]
    routers_only = "--routers-only" in sys.argv[1:]
    flags = ("--manager-only", "--routers-only")
    chosen = [a for a in sys.argv[1:] if a not in flags] or list(TARGETS)
    if routers_only:
        for target in (t for t in ROUTER_TARGETS if t in chosen):
            with tempfile.TemporaryDirectory() as tmp:
                collect_routers(target, tmp)
                for old in router_paths(out / TARGETS[target]):
                    old.unlink()
                keep_traces(tmp, out / TARGETS[target], signature, read_trace)
        (ROOT / "docs" / "findings.md").write_text(page(), encoding="utf-8")
        return
    for target, folder in TARGETS.items():  # e.g. python findings/collect.py lmdeploy==0.18.0
        if target not in chosen or (manager_runs_only and folder not in MANAGERS):
            continue
        if engine_only(target):  # its engine-machine traces are collected by hand
            continue
        manager = MANAGERS.get(folder, "none")
        with tempfile.TemporaryDirectory() as tmp:
            if manager_runs_only:
                conform(target, ["--machine", "requests", "--manager", manager], tmp)
                for old in (out / folder).glob("requests-manager-*.itf.json"):
                    old.unlink()
                keep_traces(tmp, out / folder, signature, read_trace)
                continue
            if target in MANAGER_ONLY:
                status = conform(target, ["--machine", "requests"], tmp)
            elif target not in EVENTS_ONLY:
                pools = ["--machine", "pool,requests", "--manager", manager]
                status = conform(target, [*pools, "--level", "safety,order,robustness"], tmp)
            else:
                status = 0
            if status not in (0, 1):  # the target could not run: keep what we had
                print(f"{target}: not collected (exit {status})", file=sys.stderr)
                continue
            for consumer in CONSUMERS if target not in MANAGER_ONLY else ():
                events = ["--machine", "pool", "--level", "events", "--consumer", consumer]
                if conform(target, events, tmp) == 2:
                    print(f"{folder}: {NO_EVENTS} (the events level does not run)")
            expect = out / folder / EXPECT_FILE  # the known findings stay: written by hand
            kept = expect.read_bytes() if expect.exists() else None
            engine_traces = {p.name: p.read_bytes() for p in engine_paths(out / folder)}
            if target in ROUTER_TARGETS and not manager_runs_only:
                collect_routers(target, tmp)
            shutil.rmtree(out / folder, ignore_errors=True)
            keep_traces(tmp, out / folder, signature, read_trace)
            if kept is not None:
                expect.write_bytes(kept)
            for name, data in engine_traces.items():
                (out / folder / name).write_bytes(data)
    (ROOT / "docs" / "findings.md").write_text(page(), encoding="utf-8")


def collect_routers(target: str, tmp: str) -> None:
    """The events level judged by each router of :data:`ROUTERS`, both machines."""
    for router in ROUTERS:
        events = ["--machine", "pool,requests", "--level", "events", "--consumer", router]
        if conform(target, events, tmp) == 2:
            print(f"{target}: the {router} consumer could not run (its extra missing?)")


def router_paths(folder: Path) -> list[Path]:
    """The traces of the events level under a router of :data:`ROUTERS` in ``folder``."""
    return [
        p
        for p in pool_paths(folder)
        if any(f"-events-{r}-" in p.name or f"-pool-{r}-" in p.name for r in ROUTERS)
    ]


def keep_traces(tmp: str, folder: Path, signature: Any, read_trace: Any) -> None:
    """Copy the traces a run wrote into ``folder``, named by run and kind of finding."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in pool_paths(Path(tmp)):
        trace = read_trace(path)
        events_run = trace.meta.consumer is not None
        judged = ("property 'events-", "property 'router-")
        if events_run and not any(p in trace.meta.message for p in judged):
            # the events level runs in lockstep too: a pool-level finding it ran into is the
            # pool levels' to report
            print(f"{folder.name}: events run also met: {trace.meta.message[:100]}")
            continue
        kind = re.sub(r"[^a-z0-9]+", "-", signature(trace.meta.message).lower()).strip("-")
        if EMPTY_STORE in trace.meta.message:
            kind += "-empty-store"  # another cause than the copies' router-recall
        name = f"{run_of(trace)}-{kind}.itf.json"
        shutil.copy(path, folder / name)
        print(f"{folder.name}/{name}")


def run_of(trace: Any) -> str:
    """The run a trace came from, as the page's columns name it: ``pool-safety``,
    ``requests-pool``, ``pool-events-set``."""
    run = f"{trace.meta.machine}-{trace.meta.level}"
    return run if trace.meta.consumer is None else f"{run}-{trace.meta.consumer}"


#: What each target is, and the levels it passed, for the page's header rows.
ABOUT = {
    "vllm-0.34.0": "vLLM 0.34.0's BlockPool, isolated from its wheel (profile vllm-0.34), "
    "with the helpers its pool imports loaded from the wheel too (`vllm/utils/gc_utils.py`: "
    "its index is built with `gc_untrack({})`). Each finding below was read again in 0.34.0's "
    "`vllm/v1/core/block_pool.py`: the out-of-contract calls it accepts are 0.33.0's, in code "
    "0.34 left as it was (`get_new_blocks` takes a negative count, `free_blocks` decrements "
    "without a check, `touch` takes a free block, `cache_full_blocks` neither checks that a "
    "block is held nor that caching is on, `move_block_hashes` gives keys to the null "
    "block), and so is the partial entry's `BlockStored` naming the fine hash before "
    "`num_tokens` as its parent (vLLM #58119)",
    "vllm-0.33.0": "vLLM 0.33.0's BlockPool, isolated from its wheel (profile vllm-0.33)",
    "vllm-0.30.0": "vLLM 0.30.0's BlockPool, isolated from its wheel (profile vllm-0.30); "
    "checked at the events level only",
    "vllm-0.24.0": "vLLM 0.24.0's BlockPool, isolated from its wheel (profile vllm-0.24)",
    "vllm-0.10.2": "vLLM 0.10.2's BlockPool, isolated from its wheel (profile vllm-0.10)",
    "aphrodite-0.24.1": "Aphrodite Engine 0.24.1's v1 BlockPool, isolated from its release "
    "wheel (aphrodite-engine) under its own package name, aphrodite (profile vllm-0.30: its "
    "pool is vLLM's of the 0.30 generation without unpin_blocks and KVCacheBlock.pool). Its "
    "findings are vLLM's, inherited: the robustness level's out-of-contract calls accepted, "
    "and the partial entry's BlockStored naming the fine hash before num_tokens as its "
    "parent (vLLM #58119). vLLM's pre-0.24 double queue (`free_blocks([b, b])` on a block "
    "held twice queues it twice) is not in this wheel: its `free_blocks` decides per block "
    "inside the loop (the safety and order levels pass). The source on GitHub read for this "
    "page (commit 3bce4a6; the issue that asked for this target cites b42eeec) still "
    "decrements every block first and then queues each block at 0, so that source has the "
    "bug; only the wheel is run here. Its own KVCacheManager (`--manager aphrodite`: vLLM "
    "0.33's manager calls over that pool, read off its kv_cache_manager.py) passes the "
    "requests machine",
    "vllm-mlx-0.6.0": "vllm-mlx 0.6.0's PagedCacheManager (profile vllm-mlx)",
    "nanovllm-npu-0.0.2": "nano-vllm's BlockManager as nano-vllm-npu 0.0.2 ships it "
    "(upstream's, unchanged but for the package name), a manager judged by the request-level "
    "properties (`--target nanovllm --machine requests`, profile nanovllm; the wheel's "
    "scheduler.py and attention store are upstream's 82f5ca2 but for formatting); its block b is "
    "the suite's b + 1. It keys a block when it schedules it (`allocate`, `may_append`), "
    "which the profile states (`scheduled_keys_within_pass`): upstream's scheduler (82f5ca2) "
    "admits every waiting request into one prefill pass and each attention layer stores its "
    "KV before it attends, so a hit on a block keyed in the same pass reads written KV; a "
    "request never leaves before its pass, so none is drawn doing so. The `own-contents` "
    "finding of earlier runs was that design judged without the knob, and is withdrawn",
    "nanovllm-fork-20260210": "nano-vllm's BlockManager as nano-vllm-fork 20260210 ships it: "
    "`deallocate` drops a freed block's `hash_to_block_id` entry (`--target nanovllm-fork`, "
    "profile nanovllm: the wheel's own scheduler.py still admits every waiting request into "
    "one prefill pass, CFG pairs together, and preempts in a decode step only sequences it "
    "has not yet appended to; its `LLMEngine.reset` after an exception frees blocks that may "
    "be unwritten, but the fork's `deallocate` then drops their entries, so no key outlives "
    "them)",
    "sglang-0.4.6.post5": "SGLang 0.4.6.post5's own `Scheduler` over its RadixCache and "
    "TokenToKVPoolAllocator (pages of one token), at the engine machine (`--target "
    "sglang==0.4.6.post5,page=1 --machine engine`): the release's scheduler methods plan "
    "every batch (`handle_generate_request`, `get_next_batch_to_run`, `run_batch` with the "
    "suite as the model, `process_batch_result`), and its idle pass runs its own "
    "`check_memory`. SGLang has neither a pool nor a manager to call (the requests machine "
    "refuses it). Its KV events (`enable_kv_cache_events`, handed by the scheduler's "
    "`_publish_kv_events` to the publisher) are judged on the same runs (`--consumer "
    "count|set`): every node the tree stores under the root names the root's hash, "
    "`hash(())`, as its parent, a hash no event ever stored (vLLM names no parent for a "
    "first block), so `events-parent-known` breaks on the first insert; and a node's hash "
    "is that of its own tokens, not of its prefix, so two nodes holding the same tokens "
    "under different prefixes share one hash, which the set consumer loses when one of "
    "them goes (`tests/conformance/test_sglang_0_4_engine.py` shows both on the release's "
    "own code; the first finding ends every test case, so the runs here report only the "
    "parent)",
    "sglang-0.4.6.post5-paged": "The same over SGLang 0.4.6.post5's "
    "PagedTokenToKVPoolAllocator, the page size drawn (`--target "
    "sglang==0.4.6.post5,page=drawn --machine engine`): blocks are pages, and the two "
    "triton kernels that allocate an extend or a decode step run unchanged in triton's "
    "interpreter. The parent finding is the same; the decode memory check's page counted "
    "one token late is its own finding, below",
    "lmdeploy-0.18.0": "LMDeploy 0.18.0's LogicalAllocator (PyTorch engine), isolated from "
    "its wheel, as a pool without a prefix cache (profile lmdeploy); its spec block b is "
    "LMDeploy's logical block b - 1. Its own manager is its DefaultBlockManager with the "
    "prefix trie (BlockTrie), driven as its scheduler drives them and judged by the "
    "request-level properties (`--machine requests --manager lmdeploy`): by design it keys "
    "a block when it schedules it, swaps a fresh block for the trie's block of the same "
    "tokens (`append-only` lets that pass), and keys decoded blocks when the sequence next "
    "needs a block (`hit-keys` reads up to the deepest trie node it reached). The profile "
    "states the first (`scheduled_keys_within_pass`): every sequence a prefill turn admits "
    "runs in that turn's one forward pass, whose attention fills each layer's cache before "
    "it attends, and none leaves before it (the adapter draws no such step). The "
    "`own-contents` finding of earlier runs was that design judged without the knob, and "
    "is withdrawn",
    "lmdeploy-0.16.0": "LMDeploy 0.16.0's LogicalAllocator (PyTorch engine), isolated from "
    "its wheel, as a pool without a prefix cache (profile lmdeploy; its spec block b is "
    "LMDeploy's logical block b - 1), and its DefaultBlockManager with the prefix trie "
    "driven through that release's own scheduler calls (`SchedulerSession.add_sequence`, "
    "the `Scheduler`'s `_PrefillAdmissionAttempt`, `RecomputeEvictionHelper.evict_for_seq`, "
    "`remove_sequence`), judged by the request-level properties (`--machine requests "
    "--manager lmdeploy`). Its findings are 0.18.0's, each read again in 0.16.0's own "
    "files: the allocator's `free`, `allocate` and `add_ref_count` are the same code, and "
    "the trie attaches a block at scheduling as 0.18's does. 0.16.0's `BlockTrie` keeps a "
    "sequence's own fresh block only over the blocks its match stepped back from (the "
    "recompute-overlap range `_extend_trie_path` reads); the match stops before a "
    "block-aligned prompt's last block, which is therefore never in that range, so the "
    "`write-guard` finding stands",
}
_NANO_NOTES = {
    "computes-last-token": "Upstream issue "
    "[#144](https://github.com/GeeeekExplorer/nano-vllm/issues/144): a prompt whose blocks "
    "are all cached (its "
    "length a multiple of the block size) is scheduled with every token cached, so the "
    "engine has no token to compute and no logits to sample from.",
    "keys-shared": "The same patch seen from a new request: a finished request's freed "
    "blocks keep their hash and tokens, but the fork's `deallocate` deleted their "
    "`hash_to_block_id` entries, so a later request with the same prefix is admitted with "
    "nothing cached (block_manager.py `deallocate`, the `del self.hash_to_block_id` under "
    "the fix comment).",
    "resume-finds-prefix": "The fork's patch for #163 drops a block's `hash_to_block_id` "
    "entry when the block is freed, but the block keeps its hash: a preempted request, "
    "resumed, no longer finds the prefix its freed blocks still hold (every freed block "
    "is lost to the prefix cache).",
    "invariant": "Upstream issue "
    "[#163](https://github.com/GeeeekExplorer/nano-vllm/issues/163): `deallocate` leaves a "
    "freed block's "
    "`hash_to_block_id` entry in place; when the block is reused the entry names a block "
    "that no longer carries that hash. The token comparison on lookup masks it unless the "
    "block holds the same tokens under another prefix.",
}
_LMDEPLOY_NOTES = {
    "free-count": "`free([b, b])` on a block held twice (in the contract): both holds "
    "drop to 0 and `b` is written into the free list twice, so the free count grows by "
    "two and `b` is later handed out twice.",
    "refused-although-it-is-allowed-valueerror": "The same call when the used region is "
    "shorter than the list: the ref count is already 0 when writing both copies into "
    "the free list raises `ValueError`, so the block is leaked (count 0, not free).",
    "free-held-a-free-block": "A double free is not refused: the logical ref count goes "
    "to -1 and nothing else changes (the next allocation of the block sets it back to "
    "1, hiding the error).",
    "free-held-more-often-than-held": "A block listed more often than it is held is not "
    "refused: its count goes below 0 (-1 for a block held once and listed twice) and it "
    "stays out of the free list, leaked.",
    "get-new-blocks-count": "`allocate(-1)` is not refused: it returns no blocks and both "
    "free counts grow by one.",
    "touch-identity": "`add_ref_count` (what the trie does on a hit) takes a free block: "
    "its count becomes 1 while it stays in the free list, so it can be handed out while "
    "held.",
    "write-guard": "A block-aligned prompt whose last block is cached is not served "
    "from it (a hit leaves a token to compute), but `BlockTrie.allocate` then swaps the "
    "sequence's fresh last block for the trie's block of the same tokens, which another "
    "request holds: the engine writes the whole block again into a shared block. The "
    "values are the same tokens' KV, so the damage is limited to kernels whose results "
    "depend on the batch. Keys at scheduling within one pass (the profile's knob) do not "
    "cover it: the sequence the trie's block was keyed for writes it in the same pass too, "
    "so two sequences of one forward pass write the same block. The message names the "
    "second writer, the sequence whose table took the trie's block, whichever of the two "
    "the pass computes first.",
}
#: Notes for one target's findings, read before :data:`NOTES`.
TARGET_NOTES = {
    "nanovllm-npu-0.0.2": _NANO_NOTES,
    "nanovllm-fork-20260210": _NANO_NOTES,
    "lmdeploy-0.18.0": _LMDEPLOY_NOTES,
    # the same code in 0.16.0, read in its own wheel: the allocator's `free`, `allocate` and
    # `add_ref_count` (base_block_manager.py), `BlockTrie.match`'s loop that stops short of
    # a block-aligned prompt's last block and `_extend_trie_path`'s substitution of the
    # trie's block (block_trie/trie.py), `_free_seq` (seq_states/states.py)
    "lmdeploy-0.16.0": _LMDEPLOY_NOTES,
}
#: An engine-machine finding's heading and why it is real, by the end of its file name.
ENGINE_NOTES = {
    "preempted-still-running": (
        "a sequence the decode loop preempts stays in `running` (`IndexError`)",
        "The fork's decode loop (`nanovllm/engine/scheduler.py`, "
        "`Scheduler.schedule`, the `while not self.block_manager.can_append(seq)` branch) takes "
        "`other_seq` from `temp_running`, a copy of `self.running`, and calls "
        "`self.preempt(other_seq)`, which frees its blocks and puts it at the front of "
        "`waiting`, but never removes it from `self.running`; upstream's loop preempts "
        "`self.running.pop()`, taking it out first. The sequence is then both waiting and "
        "running: the next prefill allocates it again and appends it to `running` a second "
        "time, and a later decode step calls `may_append` on a copy whose block table the "
        "preemption emptied (`IndexError` in `block_manager.py`). The driver makes only "
        "`LLMEngine.step`'s calls (`schedule`, then `postprocess`), so every decision here is "
        "the fork's own; upstream's scheduler passes the same actions.",
    ),
    "decode-out-of-memory": (
        "without the overlap loop, the decode memory check counts a new page one token "
        "late, so the scheduler dies with `Decode out of memory`",
        "Read in 0.4.6.post5's `srt/managers/schedule_batch.py`: `check_decode_mem` asks "
        "`new_page_count_next_decode` for the pages the next decode step needs, which counts "
        "the requests whose `seqlen % page_size == 0`. In `event_loop_normal` (the loop of "
        "`--disable-overlap-schedule`, the one this driver runs) a request's `seqlen` already "
        "holds the token sampled last, whose KV the step writes at position `seqlen - 1`, so a "
        "new page is needed when `(seqlen - 1) % page_size == 0`; the overlap loop (the "
        "default) plans before the last result is added, where the count is right. Here two "
        "12-token prompts with pages of 4 each take 3 pages of 7, the check counts no new "
        "page, `alloc_decode` needs two with one free, and `alloc_paged_token_slots_decode` "
        "raises `RuntimeError: Decode out of memory` instead of retracting a request. "
        "Upstream fixed it after this release: "
        "[sgl-project/sglang PR #6671](https://github.com/sgl-project/sglang/pull/6671) "
        '("fix new_page_count_next_decode": the estimate used the sequence length instead '
        "of the KV cache length) and PR #6984 (the overlap case); 0.5.23 counts by "
        "`kv_committed_len`. Found at the engine machine with the driver's events left out "
        "(with events on, the parent finding ends every test case first): "
        "`kvpool conform --target MODULE:FACTORY --machine engine --seed 3`, a factory of "
        "this driver declaring all but `events`; the trace names the release's target and "
        "replays on it.",
    ),
    "events-parent-known": (
        "every node stored under the root names `hash(())` as its parent, a hash no event stored",
        "Read in 0.4.6.post5's `srt/mem_cache/radix_cache.py`: `_record_store_event` "
        "publishes a new node's `BlockStored` with `parent_block_hash = "
        "hash(tuple(node.parent.key))`, and the root's key is `[]` (`reset`), so every node "
        "under the root names `hash(())`; nothing ever stores the root (a reset publishes "
        "`AllBlocksCleared` only). Here the release's own `Scheduler` made every call "
        "(`handle_generate_request`, `get_next_batch_to_run`, `process_batch_result`, whose "
        "`cache_unfinished_req` / `cache_finished_req` insert the node), and its "
        "`_publish_kv_events` handed the batch to the publisher; the driver plays only the "
        "client and the model (`--machine engine`).",
    ),
}
#: What a kind of finding means, by the end of its file name.
NOTES = {
    "get-new-blocks-count": "`get_new_blocks(-1)` is not refused: it returns no blocks and "
    "the free count no longer matches the free queue.",
    "free-held-a-free-block": "A double free is not refused: the block's `ref_cnt` goes to "
    "-1 (vllm-mlx raises `KeyError`, but only after the count went to -1).",
    "free-held-more-often-than-held": "The same block listed twice in one `free_blocks` call "
    "([upstream issue #42571](https://github.com/vllm-project/vllm/issues/42571)) is not "
    "refused: the block is queued with `ref_cnt` -1 and a later allocation fails.",
    "caching-enabled": "With prefix caching off, `cache_full_blocks` still registers keys.",
    "cache-held": "A block nobody holds can be cached.",
    "null-block-was-cached-invariant": "`cache_full_blocks` caches the null block when it "
    "is among the new full blocks (vLLM 0.10 and vllm-mlx; the seed, and vLLM from 0.14 on, "
    "skip it): the null block gets a key, so a lookup of that key hands it out as a cache "
    "hit.",
    "touch-identity": "`touch` takes a free block that carries no key: not a cache hit, yet "
    "it leaves the free queue.",
    "move-null": "`move_block_hashes` can give the null block keys.",
    "free-count": "In vLLM 0.10-0.23, `free_blocks` decrements every listed block first and "
    "then queues each block at 0, so a block held twice and freed twice in one call is "
    "queued twice: an in-contract call corrupts the free queue. Fixed in 0.24.",
    "cache-parent-keyed": "Caching after an unkeyed parent block fails after changing the "
    "pool: 0.10 reads the parent hash off the parent block's key.",
    "block-size-multiple": "Before 0.12 a request's hashes are taken at `block_size`; a "
    "finer `hash_block_size` is outside this release's contract, and not refused.",
    "free-held": "A double free raises `KeyError` after `ref_cnt` went to -1: refused, but "
    "not cleanly.",
    "cache-fresh": "A block that already has a key can be cached again; the old key stays.",
}
RUNS = ("pool-safety", "pool-order", "pool-robustness", "requests-pool", "requests-manager")
#: The events runs, one per consumer model.
EVENT_RUNS = tuple(f"pool-events-{c}" for c in CONSUMERS)


def page() -> str:
    """``docs/findings.md``, written from the trace files alone."""
    sys.path.insert(0, str(ROOT))
    from kvpool.conformance.machines.engine.trace_file import read_engine_trace
    from kvpool.conformance.machines.events.upstream import UPSTREAM, report_link, upstream_report
    from kvpool.conformance.trace.files import read_trace
    from kvpool.conformance.trace.show import action_text
    from kvpool.conformance.trace.trust import replay_command

    out = ROOT / "findings"
    lines = [
        "# Findings in real pools",
        "",
        "Every difference the suite finds in a pool nobody here wrote, with its shrunk trace.",
        "Generated by `python findings/collect.py` from the trace files in `findings/`, which",
        "`tests/test_findings.py` replays on every CI run: a finding that disappears (fixed",
        "upstream, or changed by our suite) fails the build until this page is regenerated.",
        "Nothing is tuned away: a profile only states what a release does by design, and",
        "anything outside the caller's contract is checked at the `robustness` level.",
        "Each finding links its trace file, published with this site at the path it has in",
        "the repository (the project declares no repository URL to link instead).",
        "",
        "| target | " + " | ".join((*RUNS, *EVENT_RUNS)) + " |",
        "|---|" + "---|" * (len(RUNS) + len(EVENT_RUNS)),
    ]
    traces = {
        folder: [read_trace(p) for p in pool_paths(out / folder)] for folder in TARGETS.values()
    }
    engine_traces = {
        folder: [read_engine_trace(p) for p in engine_paths(out / folder)]
        for folder in TARGETS.values()
    }

    by_folder = {folder: target for target, folder in TARGETS.items()}
    for folder, found in traces.items():
        target = by_folder[folder]
        manager_only = target in MANAGER_ONLY
        engine = engine_only(target)
        emits = publishes_events(target)
        cells = []
        for run in (*RUNS, *EVENT_RUNS):
            n = sum(1 for t in found if run_of(t) == run)
            if engine and run in EVENT_RUNS:  # its events are judged at the engine machine
                consumer = run.removeprefix("pool-events-")
                n = sum(1 for t in engine_traces[folder] if t.consumer == consumer)
            if run in EVENT_RUNS and not emits:
                cells.append(NO_EVENTS)
            elif run in RUNS and engine:
                cells.append("-")  # no pool or manager API: the engine machine only
            elif run == "requests-manager" and not (manager_only or folder in MANAGERS):
                cells.append("-")  # no manager of its own is run for this pool
            elif run != "requests-manager" and run not in EVENT_RUNS and manager_only:
                cells.append("-")  # a manager with no pool API: only its manager run
            elif run in RUNS and target in EVENTS_ONLY:
                cells.append("not run")
            else:
                cells.append("pass" if n == 0 else f"{n} finding{'s' * (n > 1)}")
        lines.append(f"| {folder} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "`requests-manager` is a target's own manager beside the spec's: vLLM's",
        "`KVCacheManager` (`--machine requests --manager vllm`) for the vLLM releases,",
        "LMDeploy's block manager with its prefix trie (`--manager lmdeploy`), the engine's",
        "own for nano-vllm; `-`: no such manager is run (vllm-mlx has none of vLLM's kind;",
        "vLLM 0.30.0 is checked at the events level only). SGLang has neither a pool nor a",
        "manager to call: its own scheduler runs at the engine machine (`--machine engine`),",
        "where its events columns are judged; each target's engine-machine findings are",
        "listed in its section below.",
        "",
        "The events columns feed each release's KV events, taken after every step, to a",
        "consumer model ([The KV events contract](guide/kv-events-contract.md)): `count`,",
        "the contract vLLM documents, and `set`, as some routers keep the stream. Each",
        "events finding below names the consumer it breaks and the upstream report it",
        "matches.",
    ]
    lines += [
        "",
        "## Where releases differ by design (profiles)",
        "",
        "These are not findings: each release is checked against its own profile, picked",
        "from its version (`kvpool targets` lists them). Running every release corrected",
        "three dates of the first version table, written from reading: `hash_block_size`",
        "arrived in 0.12 and `evict_blocks` in 0.13 (not both in 0.14); 0.27.0 also sends",
        "caching-off frees to the back (not 0.27.1 alone); 0.12-0.23 key a block spanning",
        "several hash blocks by their hashes concatenated.",
        "",
        "| profile | what it captures |",
        "|---|---|",
    ]
    from kvpool.spec import PROFILES

    lines += [f"| {p.name} | {p.description} |" for p in PROFILES.values()]
    lines += consumers_section(out, traces, read_trace, action_text, replay_command)
    lines += simulators_section(out)
    for folder, found in traces.items():
        lines += ["", f"## {folder}", "", ABOUT[folder] + ".", ""]
        lines += known_findings(out / folder / EXPECT_FILE, folder)
        paths = pool_paths(out / folder)
        kept = [(p, t) for p, t in zip(paths, found, strict=True) if t.meta.consumer not in ROUTERS]
        engine_lines = engine_findings(out, folder)
        if not kept and not engine_lines:
            lines.append("No findings.")
        for path, trace in kept:
            stem = path.name.removesuffix(".itf.json")
            where = f"findings/{folder}/{path.name}"
            notes = [*TARGET_NOTES.get(folder, {}).items(), *NOTES.items()]
            note = next((text for end, text in notes if stem.endswith(end)), "")
            run = f"{trace.meta.machine}/{trace.meta.level}"
            if trace.meta.consumer is not None:
                run += f" ({trace.meta.consumer} consumer)"
                number = upstream_report(trace.meta)
                note = f"Breaks the {trace.meta.consumer} consumer; " + (
                    "no upstream report matches."
                    if number is None
                    else f"matches upstream {report_link(number)}: {UPSTREAM[number][0]}."
                )
            lines += [
                f"### {run}: {title(trace.meta.message, note)}",
                "",
                *([note, ""] if note else []),
                f"> {trace.meta.message}",
                "",
                "```",
            ]
            lines += [f"{i:>3}. {action_text(a)}" for i, a in enumerate(trace.actions, 1)]
            lines += [
                "```",
                "",
                f"Trace: [`{where}`](../{where}). Replay it from the repository's root "
                "(or give the path of the downloaded file): "
                f"`{replay_command(where, trace.meta)}`",
                "",
            ]
        lines += engine_lines
    return "\n".join(lines).rstrip() + "\n"


def pool_paths(folder: Path) -> list[Path]:
    """The traces of the pool and requests machines in ``folder`` (not the engine's)."""
    return [p for p in sorted(folder.glob("*.itf.json")) if not p.name.endswith(ENGINE_SUFFIX)]


def engine_paths(folder: Path) -> list[Path]:
    """The engine machine's traces in ``folder``."""
    return sorted(folder.glob(f"*{ENGINE_SUFFIX}"))


def engine_findings(out: Path, folder: str) -> list[str]:
    """The page's lines for a target's engine-machine findings: each trace's finding, the
    note on why it is real, its client/model actions and the command that replays it."""
    from kvpool.conformance.machines.engine.command import engine_trace_lines
    from kvpool.conformance.machines.engine.trace_file import read_engine_trace

    lines: list[str] = []
    for path in engine_paths(out / folder):
        trace = read_engine_trace(path)
        where = f"findings/{folder}/{path.name}"
        stem = path.name.removesuffix(ENGINE_SUFFIX)
        about = next((text for end, text in ENGINE_NOTES.items() if stem.endswith(end)), None)
        heading, note = about or (f"`{trace.message[:80]}`", "")
        _, setup, *actions, message = engine_trace_lines(trace)
        lines += [
            f"### engine/scheduler: {heading}",
            "",
            *([note, ""] if note else []),
            f"> {message}",
            "",
            "```",
            f"{setup}, seed {trace.seed}",
            *actions,
            "```",
            "",
            f"Trace: [`{where}`](../{where}). Replay it from the repository's root "
            f"(or give the path of the downloaded file): `kvpool replay {where} "
            f"--target {trace.target}`",
            "",
        ]
    return lines


def known_findings(path: Path, folder: str) -> list[str]:
    """The page's table of a target's known findings, from its expectations file (none:
    no lines)."""
    if not path.exists():
        return []
    from kvpool.conformance.machines.pool.expectations import read_expectations

    expected = read_expectations(path)
    lines = [
        f"Known findings (`findings/{folder}/{EXPECT_FILE}`; `kvpool conform --expect` "
        "passes them and fails on any other):",
        "",
        "| rule | level | situation | upstream |",
        "|---|---|---|---|",
    ]
    for e in expected.entries:
        level = (e.level or "every level") + (" (rare)" if e.rare else "")
        cells = (f"`{e.rule}`", level, e.situation, f"<{e.upstream}>")
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return [*lines, ""]


#: What each router expects of the stream, and where that is written.
ROUTER_CONTRACTS = {
    "dynamo": "logical presence: `Stored` when a hash becomes present, `Removed` when its "
    "last copy goes (a Dynamo maintainer's review, "
    "[ai-dynamo/dynamo PR #10666](https://github.com/ai-dynamo/dynamo/pull/10666)); its "
    "radix tree keeps one node per hash under its parent",
}
ROUTER_CONTRACTS["vllm-router"] = (
    "logical presence too: a store of a hash it holds is idempotent per worker and the "
    "first removal drops it (vllm-router 0.1.17, `src/kv_index/indexer.rs`: `store`, "
    "`remove`, and its test `store_is_idempotent_per_owner_tier_block`)"
)
#: A finding whose step published a store with no hashes.
EMPTY_STORE = "BlockStored([] "
#: The empty store: what vLLM emits and what vllm-router states it takes.
EMPTY_STORE_NOTE = (
    "The router's side of a contract mismatch. vLLM 0.33.0's `cache_full_blocks` publishes "
    "a `BlockStored` whenever events are on, its `block_hashes` empty when every new full "
    "block is null or masked out (`vllm/v1/core/block_pool.py`: the hashes of null and "
    "masked blocks are skipped, the event is not); vllm-router 0.1.17 decodes a batch whole "
    'and refuses one with an empty `block_hashes` (`src/kv_index/decode.rs`: "KV event '
    'hashes must be a nonempty array"); it takes the refused batch for a hole in the '
    "sequence and discards every block it held of that worker (`src/kv_index/subscriber.rs`,"
    " `invalidate_source`), the valid stores of the same batch with them."
)
#: What the stream follows, and where that is written.
STREAM_CONTRACT = (
    "count residency: one `BlockStored` per physical copy, one `BlockRemoved` per copy "
    "that goes (vLLM's own tests and docs pin it; "
    "[the KV events contract](guide/kv-events-contract.md))"
)


def consumers_section(
    out: Path, traces: dict[str, list[Any]], read_trace: Any, action_text: Any, replay: Any
) -> list[str]:
    """The page's consumers section: every router finding, with which contract the stream
    follows and which the router expects, and whose fault each one is."""
    lines = [
        "",
        "## Consumers: routers judged on the streams",
        "",
        "`kvpool conform --level events --consumer ROUTER` feeds the release's stream to a",
        "real router's index and asks it, after every step, about every prefix the stream",
        "named: `router-recall` (it knows every prefix the worker serves) and",
        "`router-precision` (it claims nothing the worker does not serve), against what a",
        "lookup on the spec's pool hits. The spec's count model runs beside it as the",
        "reference: a stream fault is reported as the stream's (`events-*`, for the count",
        "consumer) before any router is asked. Live measurements of the same routers are on",
        "[the KV events contract](guide/kv-events-contract.md#routers-on-a-live-stream).",
    ]
    for folder, found in traces.items():
        paths = pool_paths(out / folder)
        for path, trace in zip(paths, found, strict=True):
            router = trace.meta.consumer
            if router not in ROUTERS:
                continue
            run = f"{trace.meta.machine}/{trace.meta.level} ({router} consumer)"
            if EMPTY_STORE in trace.meta.message:
                note = EMPTY_STORE_NOTE
            elif "property 'router-" in trace.meta.message:
                note = (
                    f"The router's side of a contract mismatch. The stream follows "
                    f"{STREAM_CONTRACT}; {router} expects {ROUTER_CONTRACTS[router]}. The "
                    "count model on the same stream holds every copy; the router drops the "
                    "prefix (and what hangs under it) at the first removal."
                )
            else:
                note = (
                    "The stream's fault, not the router's: the reference count model cannot "
                    "place the store either (vLLM's partial-block stores name a parent never "
                    "published: [#58119](https://github.com/vllm-project/vllm/issues/58119))."
                )
            lines += [
                "",
                f"### {folder} · {run}: {title(trace.meta.message)}",
                "",
                note,
                "",
                f"> {trace.meta.message}",
                "",
                "```",
                *[f"{i:>3}. {action_text(a)}" for i, a in enumerate(trace.actions, 1)],
                "```",
                "",
                f"Trace: [`findings/{folder}/{path.name}`](../findings/{folder}/{path.name}). "
                "Replay it from the repository's root (or give the path of the downloaded "
                f"file): `{replay(f'findings/{folder}/{path.name}', trace.meta)}`",
            ]
    return lines


#: Simulators judged by ``kvpool validate`` against the engine they simulate: the folder of
#: their shrunk request sequences, and the driver module that re-runs one.
SIMULATORS = {"dynamo-mocker-1.6.1": "kvpool.conformance.tools.validate.dynamo_mocker"}


def simulators_section(out: Path) -> list[str]:
    """The page's simulators section: each shrunk request sequence ``kvpool validate``
    wrote (a request log whose header says the difference), with both sides' contracts."""
    import json

    lines = [
        "",
        "## Simulators: fidelity to the engine simulated",
        "",
        "`kvpool validate` ([Validating an engine's stream](guide/validate.md)) replays a",
        "simulator's requests through the spec's manager under the profile of the engine it",
        "simulates and judges its recorded KV-event stream after every request. A difference",
        "is one from the simulated engine, found by running the simulator (its driver is",
        "started per shrinking attempt); each file below is the shrunk request sequence.",
    ]
    for folder, driver in SIMULATORS.items():
        paths = sorted((out / folder).glob("validate-*.jsonl"))
        if not paths:
            continue
        lines += [
            "",
            f"### {folder} (vLLM backend, profile vllm-0.33): stores and removals per copy",
            "",
            "A fidelity difference from vLLM. The mocker keeps duplicate physical copies of a",
            "block as vLLM does (a prompt cached whole computes its last block again, a second",
            "copy of a hash still cached), but publishes `BlockStored` only for the first",
            "resident copy of a hash: its vLLM block pool's caching step returns whether the",
            "copy is the first resident one of its hash, and the store is published only then",
            "(read in the mocker's vLLM block-pool source; the installed package holds it",
            "compiled). Likewise it publishes one `BlockRemoved` for a hash, as its last copy",
            "goes, where vLLM publishes one per copy evicted (seen on a run of the mocker:",
            "`tests/validate/test_dynamo_mocker.py`). That is "
            + ROUTER_CONTRACTS["dynamo"]
            + "; vLLM's stream follows",
            STREAM_CONTRACT + ". A router tested against the mocker never meets the",
            "per-copy stores and removals a real vLLM stream carries. Until the second copy",
            "the two streams agree after every request: stores, parents, prefixes and hits.",
        ]
        for path in paths:
            text = path.read_text(encoding="utf-8").splitlines()
            header = json.loads(text[0])
            where = f"findings/{folder}/{path.name}"
            lines += ["", f"> {header['difference']}", "", "```"]
            for number, line in enumerate(text[1:], 1):
                request = json.loads(line)
                prompt = request["prompt"]
                lines.append(
                    f"{number:>3}. {request['request_id']}: prompt of {len(prompt)} tokens "
                    f"{prompt}, cached {request['cached_tokens']}"
                )
            lines += [
                "```",
                "",
                f"Requests: [`{where}`](../{where}). Run them on the mocker and judge its "
                f"stream: `python -m {driver} {where} log.jsonl recording.jsonl && kvpool "
                f"validate log.jsonl recording.jsonl --profile {header['profile']}`",
            ]
    return lines


def title(message: str, note: str = "") -> str:
    """A finding's heading: what broke, by its rule, invariant or property id, and the
    upstream reports its note links (a page of findings must not read 31 times alike)."""
    operation = re.match(r"(?:after )?(\w+)", message)
    op = f"`{operation.group(1)}`" if operation else "a call"
    named = re.search(r"(rule|invariant|property) '([^']+)'", message)
    if "was accepted although it breaks the contract" in message and named:
        detail = message[named.end() :].removeprefix(": ").split(";")[0]
        what = f"{op} accepts what rule `{named.group(2)}` forbids ({detail})"
    elif "but the pool changed" in message and named:
        what = f"{op} refuses (rule `{named.group(2)}`) but changes the pool"
    elif "was refused although it is allowed" in message:
        error = re.search(r"allowed: (\w+)", message)
        what = f"{op} refuses an allowed call" + (f" ({error.group(1)})" if error else "")
    elif named:
        what = f"{named.group(1)} `{named.group(2)}` broken"
        what += f" after {op}" if message.startswith("after ") else ""
    else:
        observed = message.split(": ")[1] if ": " in message else message
        what = f"after {op}: {observed} differs"
    reports = dict.fromkeys(re.findall(r"\[[^\]]*?#(\d+)\]\((https://[^)]+)\)", note))
    if reports:
        what += " · upstream " + ", ".join(f"[#{n}]({url})" for n, url in reports)
    return what


if __name__ == "__main__":
    main()
