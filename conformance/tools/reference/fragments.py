"""Generated fragments a hand-written page can include with a marker on a line of its own:
``<!-- kvpool:NAME -->``. The docs hook replaces each marker when the site is built, so a
table or diagram in the narrative comes from the spec like the reference pages do."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from pathlib import Path

from kvpool.conformance.exits import markdown_table
from kvpool.conformance.machines.engine import driver as engine_driver
from kvpool.conformance.machines.engine import operations as engine_operations
from kvpool.conformance.machines.pool.levels import LEVELS

from .bench_record import load as load_bench_record
from .bench_record import managers_table
from .events_matrix import events_matrix
from .floor_record import floor_table
from .floor_record import load as load_floor_record
from .hunt_record import load as load_hunt_record
from .hunt_record import rates_table
from .instructions_record import instructions_table
from .instructions_record import load as load_instructions_record
from .latest_record import latest_table
from .latest_record import load as load_latest_record
from .layout_table import layout_table
from .lifecycle_svg import lifecycle_svg
from .lifecycle_table import states_table, transitions_table
from .markdown import code, prose, table
from .monitor_record import load as load_monitor_record
from .monitor_record import monitor_table
from .mutants_record import load as load_mutants_record
from .mutants_record import record_table as mutants_record_table
from .mutmut_score import load, score_table, survivors_table
from .pool_events import event_fields_section
from .pool_record import growth_table, pools_table
from .pool_record import load as load_pool_record
from .profiles_page import consumer_table, version_table
from .soak_record import load as load_soak_record
from .soak_record import soak_tables

#: The checkout's docs folder (the default for fragments that read data kept there).
DOCS = Path(__file__).resolve().parents[3] / "docs"

#: Turns a path under ``docs/`` into a link from the page being built.
Linker = Callable[[str], str]

MARKER = re.compile(r"[ \t]*<!--\s*kvpool:([a-z0-9-]+)\s*-->[ \t]*")


def route_check_table(folder: Path, view: str = "table") -> str:
    """The contract page's route-check fragments, from every recording in ``folder``: the
    scenario x consumer table, the indexer's curve at a few points, the per-rank table, the
    charts."""
    from kvpool.conformance.tools.routes import chart, recording

    recordings = [recording.read_recording(p) for p in recording.recording_paths(folder)]
    if view == "over-time":
        return "\n\n".join(recording.over_time_table(r, "dynamo-indexer") for r in recordings)
    if view == "ranks":
        return recording.ranks_table(recordings)
    if view == "restart":
        return recording.restart_table(recordings)
    if view == "indexer":
        return recording.indexer_table(recordings)
    if view == "chart":
        return "\n" + chart.route_check_charts(recordings) + "\n"
    return recording.contract_table(recordings)


def vectors_count(folder: Path) -> str:
    """How many vectors the corpus in ``folder`` holds, per profile and in all, counted
    when the site is built."""
    counts = {
        profile.name: sum(1 for _ in profile.rglob("*.itf.json"))
        for profile in sorted(folder.iterdir())
        if profile.is_dir()
    }
    rows = [(code(name), f"{count:,}") for name, count in counts.items()]
    rows.append(("all", f"{sum(counts.values()):,}"))
    return table(("profile", "vectors"), rows)


def levels_table(link: Linker, docs_dir: Path) -> str:
    """The conformance levels, from ``kvpool.conformance.machines.pool.levels``."""
    rows = [
        (
            code(level.name),
            prose(level.description),
            "exact" if level.exact_order else "any (the spec adopts the pool's choice)",
            "yes" if level.out_of_contract else "no",
        )
        for level in LEVELS.values()
    ]
    return table(("level", "what passes", "eviction order", "out-of-contract input"), rows)


def engine_actions_table() -> str:
    """The engine machine's actions, from its table
    (``kvpool.conformance.machines.engine.operations``)."""
    rows = [
        (code(op.name), code(f"{op.call}()"), code(op.needs) if op.needs else "every driver",
         prose(op.about))
        for op in engine_operations.ENGINE_OPERATIONS
    ]  # fmt: skip
    return table(("action", "driver call", "capability", "what it is"), rows)


def engine_reads_table() -> str:
    """What the engine machine reads of a driver, each with its call and the capability
    declaring it (``kvpool.conformance.machines.engine.driver``: ``READ_CALLS``,
    ``CAPABILITIES``)."""
    rows = [
        (code(f"{call}()"), code(capability), prose(engine_driver.CAPABILITIES[capability]))
        for capability, call in engine_driver.READ_CALLS.items()
    ]
    return table(("driver call", "capability", "what the machine does with it"), rows)


def _diagram(link: Linker, docs_dir: Path) -> str:
    # raw HTML on its own, set off by blank lines, passes through Markdown untouched
    return "\n" + lifecycle_svg() + "\n"


#: marker name -> (what it inserts, the generator: given a linker and the docs folder).
FRAGMENTS: dict[str, tuple[str, Callable[[Linker, Path], str]]] = {
    "exit-statuses": (
        "every exit status of every command, what it means and what to do "
        "(kvpool.conformance.exits, the one definition)",
        lambda link, docs_dir: markdown_table(),
    ),
    "lifecycle-diagram": (
        "the state diagram of the six lifecycle states (inline SVG), from exploring the spec",
        _diagram,
    ),
    "lifecycle-states": (
        "the table of the six lifecycle states (ref_cnt, key, queue, writable, hittable)",
        lambda link, docs_dir: states_table(),
    ),
    "lifecycle-transitions": (
        "the table of every lifecycle transition the spec makes, linking each operation",
        lambda link, docs_dir: transitions_table(link),
    ),
    "version-table": (
        "vLLM release ranges to profiles (kvpool.spec.profile.VLLM_RELEASES)",
        lambda link, docs_dir: version_table(link=False),
    ),
    "layout": (
        "the suite's folders and what each holds, from each package's own docstring",
        lambda link, docs_dir: layout_table(docs_dir.parent / "conformance"),
    ),
    "levels-table": (
        "the conformance levels (kvpool.conformance.machines.pool.levels)",
        levels_table,
    ),
    "engine-actions": (
        "the engine machine's actions: the driver call each makes and the capability it "
        "needs (kvpool.conformance.machines.engine.operations)",
        lambda link, docs_dir: engine_actions_table(),
    ),
    "engine-reads": (
        "what the engine machine reads of a driver: the call, the capability declaring it "
        "and what is judged on it (kvpool.conformance.machines.engine.driver)",
        lambda link, docs_dir: engine_reads_table(),
    ),
    "vectors-count": (
        "how many vectors the committed corpus (vectors/) holds, per profile, counted at "
        "build time",
        lambda link, docs_dir: vectors_count(docs_dir.parent / "vectors"),
    ),
    "events-matrix": (
        "target x consumer model at the events level, read from the committed findings "
        "(findings/*/pool-events-*.itf.json)",
        lambda link, docs_dir: events_matrix(docs_dir.parent / "findings"),
    ),
    "route-check-table": (
        "scenario x consumer on live streams, read from the committed recordings "
        "(docs/data/route-check/*.json, written by kvpool route-check --record)",
        lambda link, docs_dir: route_check_table(docs_dir / "data" / "route-check"),
    ),
    "route-check-over-time": (
        "Dynamo's indexer's recall and precision at a few checks of each scenario, per stream "
        "(docs/data/route-check/*.json)",
        lambda link, docs_dir: route_check_table(docs_dir / "data" / "route-check", "over-time"),
    ),
    "route-check-ranks": (
        "recall and precision per data-parallel rank (docs/data/route-check/*.json)",
        lambda link, docs_dir: route_check_table(docs_dir / "data" / "route-check", "ranks"),
    ),
    "route-check-indexer": (
        "per stream and scenario, the batches and events published and what Dynamo's indexer "
        "counted of them (docs/data/route-check/*.json)",
        lambda link, docs_dir: route_check_table(docs_dir / "data" / "route-check", "indexer"),
    ),
    "route-check-restart": (
        "the restart scenario: the new publisher's events past the old sequence and those "
        "Dynamo's indexer counted (docs/data/route-check/*.json)",
        lambda link, docs_dir: route_check_table(docs_dir / "data" / "route-check", "restart"),
    ),
    "route-check-chart": (
        "recall and precision at every check of every scenario, one chart per stream "
        "(inline SVG from docs/data/route-check/*.json)",
        lambda link, docs_dir: route_check_table(docs_dir / "data" / "route-check", "chart"),
    ),
    "event-fields": (
        "every field of every KV event a pool publishes, as the suite reads it back "
        "(kvpool.conformance.tools.reference.pool_events)",
        lambda link, docs_dir: event_fields_section(),
    ),
    "consumer-contracts": (
        "the consumer model each profile promises, and where it is written",
        lambda link, docs_dir: consumer_table(),
    ),
    "mutmut-score": (
        "the mutmut score of the unit tests, computed from docs/data/mutmut.json (marked "
        "stale when impl/ is no longer the code the run mutated)",
        lambda link, docs_dir: score_table(load(docs_dir), docs_dir.parent / "impl"),
    ),
    "manager-bench": (
        "kvpool bench --manager vllm's figures: ours against vLLM's KVCacheManager, computed "
        "from the runs kept in docs/data/bench-managers.json",
        lambda link, docs_dir: managers_table(load_bench_record(docs_dir)),
    ),
    "pool-bench": (
        "kvpool bench --compiled's figures: ours and the compiled build against vLLM's "
        "BlockPool, computed from the runs kept in docs/data/bench-pools.json",
        lambda link, docs_dir: pools_table(load_pool_record(docs_dir)),
    ),
    "floor-bench": (
        "python -m kvpool.conformance.tools.bench.floor's table: ours, vLLM's and the floor pool's "
        "time per call, and vLLM's over each, from the run kept in docs/data/bench-floor.json",
        lambda link, docs_dir: floor_table(load_floor_record(docs_dir)),
    ),
    "instructions-bench": (
        "instructions per call of ours, vLLM's and the floor pool, counted by callgrind, "
        "and vLLM's over each, computed from the counts kept in "
        "docs/data/bench-instructions.json",
        lambda link, docs_dir: instructions_table(load_instructions_record(docs_dir)),
    ),
    "pool-growth": (
        "per workload, what a call of ours and of vLLM's pool added from 1k to 1M blocks, "
        "computed from the runs kept in docs/data/bench-pools.json",
        lambda link, docs_dir: growth_table(load_pool_record(docs_dir)),
    ),
    "monitor-bench": (
        "kvpool bench --monitor's figures: the monitor's count and set consumers beside "
        "Dynamo's RadixTree, computed from the runs kept in docs/data/bench-monitor.json",
        lambda link, docs_dir: monitor_table(load_monitor_record(docs_dir)),
    ),
    "hunt-rates": (
        "kvpool conform's steps per CPU second on impl and vLLM 0.33.0, seed by seed, "
        "computed from the result tables kept in docs/data/hunt.json",
        lambda link, docs_dir: rates_table(load_hunt_record(docs_dir)),
    ),
    "mutants-record": (
        "kvpool mutants --seed N -j 1's figures, seed by seed: killed, time to kill, shrunk "
        "trace, computed from the runs kept in docs/data/mutants.json",
        lambda link, docs_dir: mutants_record_table(load_mutants_record(docs_dir)),
    ),
    "latest-releases": (
        "every engine's newest release on the package index, run by kvpool targets --latest: "
        "ran or refused, and what it found, from the run kept in docs/data/latest.json",
        lambda link, docs_dir: latest_table(load_latest_record(docs_dir)),
    ),
    "monitor-soak": (
        "each soak of kvpool monitor under .ci/soak-monitor's hostile publisher: what was "
        "sent, handled and dropped, memory, exit status, from docs/data/monitor-soak.json",
        lambda link, docs_dir: soak_tables(load_soak_record(docs_dir)),
    ),
    "mutmut-survivors": (
        "every mutant mutmut's run did not kill: the test that kills it now, or why it is "
        "equivalent (docs/data/mutmut.json)",
        lambda link, docs_dir: survivors_table(load(docs_dir)),
    ),
}


class UnknownMarker(ValueError):
    """A page names a fragment that does not exist (a typo would otherwise vanish)."""


def linker_for(page_path: str) -> Linker:
    """Relative links from the page at ``page_path`` (under ``docs/``)."""
    here = posixpath.dirname(page_path)
    return lambda target: posixpath.relpath(target, here or ".")


_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")


def expand(markdown: str, page_path: str, docs_dir: Path = DOCS) -> str:
    """``markdown`` with every marker outside a code fence replaced by its fragment
    (``docs_dir``: the docs folder, for fragments that read data kept there).

    Raises :class:`UnknownMarker` naming the page, line and marker for a name not in
    :data:`FRAGMENTS`.
    """
    link = linker_for(page_path)
    out: list[str] = []
    fence: str | None = None
    for number, line in enumerate(markdown.split("\n"), 1):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None and opened and opened.group(1).startswith(fence):
            fence = None
        marker = MARKER.fullmatch(line) if fence is None else None
        if marker is None:
            out.append(line)
            continue
        name = marker.group(1)
        if name not in FRAGMENTS:
            known = ", ".join(sorted(FRAGMENTS))
            raise UnknownMarker(
                f"{page_path}:{number}: unknown marker <!-- kvpool:{name} -->; known: {known}"
            )
        out.append(FRAGMENTS[name][1](link, docs_dir).rstrip("\n"))
    return "\n".join(out)
