"""Record a .ci/mutmut run in docs/data/mutmut.json (read by the docs: the score, and every
mutant the run did not kill with its verdict).

Run it with the stage's Python, which has mutmut:

    STAGE/.venv/bin/python .ci/mutmut_score.py STAGE --commit SHA --hours H [--verdicts F.tsv]

It reads each mutant's status from mutmut's files in STAGE/mutants, keeps the verdicts
already in docs/data/mutmut.json, and adds those of the tab-separated file (one line per
mutant: the name without ``kvpool.impl.``, ``killed`` or ``equivalent``, then the killing
test, or ``reason: explanation`` for an equivalent mutant; the explanation may be left out
once its reason has one). Every mutant that survived or had no test needs a verdict; if one
lacks it, they are listed and nothing is written (exit 1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from importlib.metadata import version
from pathlib import Path

from kvpool.conformance.tools.reference.mutmut_score import impl_tree_digest
from mutmut.stats import status_by_exit_code  # type: ignore[import-not-found]

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "data" / "mutmut.json"
PREFIX = "kvpool.impl."


def statuses(stage: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for meta in sorted((stage / "mutants").rglob("*.meta")):
        for name, exit_code in json.loads(meta.read_text())["exit_code_by_key"].items():
            found[name] = status_by_exit_code[exit_code]
    return found


def read_verdicts(path: Path, reasons: dict[str, str]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        name, verdict, by = line.split("\t")
        if verdict == "equivalent":
            key, _, text = by.partition(":")
            key = key.strip()
            if text.strip():
                reasons[key] = text.strip()
            by = key
        elif verdict != "killed":
            sys.exit(f"{path}:{number}: verdict must be killed or equivalent, not {verdict!r}")
        out[PREFIX + name] = (verdict, by)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", type=Path)
    parser.add_argument("--commit", required=True, help="the commit the run staged")
    parser.add_argument("--hours", required=True, type=float, help="how long the run took")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--verdicts", type=Path, help="new verdicts, tab-separated")
    args = parser.parse_args()

    old = json.loads(OUT.read_text()) if OUT.exists() else {"reasons": {}, "verdicts": []}
    reasons: dict[str, str] = dict(old["reasons"])
    verdicts = {v["mutant"]: (v["verdict"], v["by"]) for v in old["verdicts"]}
    if args.verdicts:
        verdicts.update(read_verdicts(args.verdicts, reasons))

    found = statuses(args.stage)
    counts: dict[str, int] = {}
    for status in found.values():
        counts[status] = counts.get(status, 0) + 1
    records, missing = [], []
    for name, status in sorted(found.items()):
        if status not in ("survived", "no tests"):
            continue
        if name not in verdicts:
            missing.append(f"{name} ({status})")
            continue
        verdict, by = verdicts[name]
        records.append({"mutant": name, "status": status, "verdict": verdict, "by": by})
    if missing:
        print(f"{len(missing)} mutants have no verdict:", *missing, sep="\n  ", file=sys.stderr)
        return 1
    used = {r["by"] for r in records if r["verdict"] == "equivalent"}
    data = {
        "schema": "kvpool-mutmut/1",
        "run": {
            "date": args.date,
            "commit": args.commit,
            # what the run mutated, so the docs can tell when impl/ has changed since
            "impl_sha256": impl_tree_digest(args.stage / "kvpool" / "impl"),
            "mutmut": version("mutmut"),
            "python": platform.python_version(),
            "hours": args.hours,
            "mutants": len(found),
            "status": dict(sorted(counts.items())),
        },
        "reasons": {k: v for k, v in sorted(reasons.items()) if k in used},
        "verdicts": records,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(found)} mutants, {counts}, {len(records)} verdicts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
