"""Collect the findings of the real targets into ``findings/`` (run by hand, not by pytest):

    python findings/collect.py

Each target runs ``kvpool conform`` (pool levels and the requests machine on its pool; for
a vLLM release whose KV cache manager can be driven, also its own manager with ``--manager
vllm``) with seed 1 and up to 12 distinct findings per run; every shrunk trace is kept under
``findings/TARGET/MACHINE-LEVEL-KIND.itf.json``. ``tests/test_findings.py`` replays them all,
and ``docs/findings.md`` reads each one.

    python findings/collect.py --manager-only

re-runs only the manager runs (``--machine requests --manager vllm``) and replaces only
their traces.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {
    "vllm==0.33.0": "vllm-0.33.0",
    "vllm==0.24.0": "vllm-0.24.0",
    "vllm==0.10.2": "vllm-0.10.2",
    "vllm-mlx": "vllm-mlx-0.6.0",
}


#: The targets whose own KV cache manager runs too (``--manager vllm``).
MANAGERS = {"vllm-0.33.0", "vllm-0.24.0", "vllm-0.10.2"}
#: Why the others have no manager run.
NO_MANAGER = {"vllm-mlx-0.6.0": "no KV cache manager of vLLM's kind"}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from kvpool.conformance.lockstep import signature
    from kvpool.conformance.trace.files import read_trace

    out = ROOT / "findings"
    manager_only = "--manager-only" in sys.argv[1:]
    for target, folder in TARGETS.items():
        if manager_only and folder not in MANAGERS:
            continue
        machines = "requests" if manager_only else "pool,requests"
        manager = "vllm" if folder in MANAGERS else "none"
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from kvpool.conformance.cli import main; main()",
                    "conform",
                    "--target",
                    target,
                    "--machine",
                    machines,
                    "--manager",
                    manager,
                    "--seed",
                    "1",
                    "--max-findings",
                    "12",
                    "--no-coverage",
                    "--trace-dir",
                    tmp,
                ],
                check=False,
                capture_output=True,
            )
            if manager_only:
                for old in (out / folder).glob("requests-manager-*.itf.json"):
                    old.unlink()
            else:
                shutil.rmtree(out / folder, ignore_errors=True)
            (out / folder).mkdir(parents=True, exist_ok=True)
            for path in sorted(Path(tmp).glob("*.itf.json")):
                if manager_only and "-requests-manager-" not in path.name:
                    continue
                trace = read_trace(path)
                kind = re.sub(r"[^a-z0-9]+", "-", signature(trace.meta.message).lower()).strip("-")
                name = f"{trace.meta.machine}-{trace.meta.level}-{kind}.itf.json"
                shutil.copy(path, out / folder / name)
                print(f"{folder}/{name}")
    (ROOT / "docs" / "findings.md").write_text(page(), encoding="utf-8")


#: What each target is, and the levels it passed, for the page's header rows.
ABOUT = {
    "vllm-0.33.0": "vLLM 0.33.0's BlockPool, isolated from its wheel (profile vllm-0.33)",
    "vllm-0.24.0": "vLLM 0.24.0's BlockPool, isolated from its wheel (profile vllm-0.24)",
    "vllm-0.10.2": "vLLM 0.10.2's BlockPool, isolated from its wheel (profile vllm-0.10)",
    "vllm-mlx-0.6.0": "vllm-mlx 0.6.0's PagedCacheManager (profile vllm-mlx)",
}
#: What a kind of finding means, by the end of its file name.
NOTES = {
    "get-new-blocks-count": "`get_new_blocks(-1)` is not refused: it returns no blocks and "
    "the free count no longer matches the free queue.",
    "free-held-a-free-block": "A double free is not refused: the block's `ref_cnt` goes to "
    "-1 (vllm-mlx raises `KeyError`, but only after the count went to -1).",
    "free-held-more-often-than-held": "The same block listed twice in one `free_blocks` call "
    "(upstream issue 42571) is not refused: the block is queued with `ref_cnt` -1 and a later "
    "allocation fails.",
    "caching-enabled": "With prefix caching off, `cache_full_blocks` still registers keys.",
    "cache-held": "A block nobody holds can be cached.",
    "null-block-was-cached-invariant": "`cache_full_blocks` caches the null block when it "
    "is among the new full blocks (vLLM 0.10 and vllm-mlx; the seed, and vLLM from 0.14 on, "
    "skip it): the null block gets a key, so a lookup of that key hands it out as a cache "
    "hit.",
    "touch-identity": "`touch` takes a free block that carries no key: not a cache hit, yet "
    "it leaves the free queue.",
    "move-null": "`move_block_hashes` can give the null block keys.",
    "foreign-route": "A block of a pool that is gone can still be freed: since 0.30 a block "
    "holds a strong reference to its pool (the seed's is weak).",
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


def page() -> str:
    """``docs/findings.md``, written from the trace files alone."""
    sys.path.insert(0, str(ROOT))
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
        "",
        "| target | " + " | ".join(RUNS) + " |",
        "|---|" + "---|" * len(RUNS),
    ]
    traces = {
        folder: [read_trace(p) for p in sorted((out / folder).glob("*.itf.json"))]
        for folder in TARGETS.values()
    }
    for folder, found in traces.items():
        cells = []
        for run in RUNS:
            n = sum(1 for t in found if f"{t.meta.machine}-{t.meta.level}" == run)
            if run == "requests-manager" and folder not in MANAGERS:
                cells.append("-")
            else:
                cells.append("pass" if n == 0 else f"{n} finding{'s' * (n > 1)}")
        lines.append(f"| {folder} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "`requests-manager` is the release's own `KVCacheManager` beside the spec's manager",
        "(`--machine requests --manager vllm`); `-`: "
        + "; ".join(f"{folder}: {why}" for folder, why in NO_MANAGER.items())
        + ".",
    ]
    lines += [
        "",
        "## Where releases differ by design (profiles)",
        "",
        "These are not findings: each release is checked against its own profile, picked",
        "from its version (`kvpool targets` lists them). Measured against the design notes'",
        "version table, three corrections: `hash_block_size` arrived in 0.12 and",
        "`evict_blocks` in 0.13 (not both in 0.14); 0.27.0 also sends caching-off frees to",
        "the back (not 0.27.1 alone); 0.12-0.23 key a block spanning several hash blocks by",
        "their hashes concatenated.",
        "",
        "| profile | what it captures |",
        "|---|---|",
    ]
    from kvpool.spec import PROFILES

    lines += [f"| {p.name} | {p.description} |" for p in PROFILES.values()]
    for folder, found in traces.items():
        lines += ["", f"## {folder}", "", ABOUT[folder] + ".", ""]
        if not found:
            lines.append("No findings.")
        for path, trace in zip(sorted((out / folder).glob("*.itf.json")), found, strict=True):
            stem = path.name.removesuffix(".itf.json")
            note = next((text for end, text in NOTES.items() if stem.endswith(end)), "")
            lines += [
                f"### {trace.meta.machine}/{trace.meta.level}: {trace.meta.message.split(': ')[0]}",
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
                f"Replay: `{replay_command(f'findings/{folder}/{path.name}', trace.meta)}`",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    main()
