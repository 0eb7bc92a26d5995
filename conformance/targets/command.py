"""``kvpool targets``: the engines of the registry, their forms, the actions each target
takes, the managers and the profiles."""

from __future__ import annotations

import click
from kvpool.spec import PROFILES, PoolConfig, get_profile
from rich.console import Console
from rich.table import Table

from ..machines.pool.target import EVICT_FIRST
from .actions_table import ActionsTable, Described
from .description import Form, TargetDescription
from .errors import TargetLoadError
from .factory_entry import FACTORY
from .loading import MANAGER_WORDS, choose_profile, load_manager, load_target
from .options import TARGET
from .registry import EngineEntry, MalformedEngineEntry, engine, registered


@click.command()
@click.option(
    "--target",
    "-t",
    "extra",
    multiple=True,
    type=TARGET,
    help="Also describe this target (repeatable), e.g. vllm==0.24.0 (downloaded if needed).",
)
@click.option(
    "--explain",
    metavar="TARGET",
    default=None,
    help="Only say which profile TARGET is judged by and why (its version, or for a vLLM "
    "clone naming none, its code), with every knob measured on it beside the profile's.",
)
@click.option(
    "--latest",
    is_flag=True,
    help="Only ask the package index (pip's configured one) for each engine's newest "
    "release and run it: downloaded once into the cache, then a short kvpool conform at "
    "every level the engine supports. Each row says whether it ran (pass, or findings with "
    "their rules) or was refused (the reason); supported is yes only where it ran. Progress "
    "goes to stderr. Exit 2 when the index answers about no engine.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="With --latest: the rows as a JSON list (for CI), instead of the table.",
)
def targets(
    extra: tuple[TargetDescription, ...], explain: str | None, latest: bool, as_json: bool
) -> None:
    """The targets that can be checked (every engine registered under the kvpool.engines
    entry-point group, kvpool's own and any installed package's), the actions each one
    takes, the managers and the profiles. vLLM releases already in the cache are described
    too."""
    from kvpool.spec import ALL_ACTIONS

    if explain is not None:
        _explain(explain)
        return
    if latest:
        _latest(as_json)
        return
    console = Console()
    entries, broken, malformed = _entries()
    forms = Table(title="targets (--target)", show_header=False)
    forms.add_column("target", no_wrap=True)
    forms.add_column("what it is")
    for entry in [*entries, FACTORY]:
        for form, description in entry.forms.items():
            forms.add_row(form, description)
    for name, why in broken:
        forms.add_row(name, why)
    console.print(forms)
    described: list[tuple[str, str, str, frozenset[str] | str]] = []
    listed = [text for entry in entries if entry.has_pool for text in _listed(entry)]
    for text in [*listed, *(d.text for d in extra)]:
        described.append(_describe_target(text))
    rows = [(a.operation, a.operation) for a in ALL_ACTIONS]
    rows.insert(2, ("free_blocks(evict_first)", EVICT_FIRST))
    console.print(ActionsTable(tuple(Described(*d) for d in described), tuple(rows)))
    for name, _, _, ops in described:
        if isinstance(ops, str):
            console.print(f"  {name}: {ops}", markup=False, highlight=False, soft_wrap=True)
    managers = Table(title="managers (--manager, the requests machine)", show_header=False)
    managers.add_column("manager", no_wrap=True)
    managers.add_column("what it is")
    for word, meaning in MANAGER_WORDS.items():
        managers.add_row(word, meaning)
    for entry in entries:
        if not entry.manager_summary:
            continue
        if entry.has_pool:
            managers.add_row(entry.name, entry.manager_summary)
        else:
            managers.add_row(entry.name, _describe_manager(entry))
    managers.add_row("module:factory", "your own manager target, from (setup, profile)")
    console.print(managers)
    _print_vllm_offers(console)
    profiles = Table(title="profiles (--profile)", show_header=False)
    profiles.add_column("profile", no_wrap=True)
    profiles.add_column("what it captures")
    for known in PROFILES.values():
        profiles.add_row(known.name, known.description)
    console.print(profiles)
    if malformed:  # listed above as unavailable; the others are not held back by it
        from ..usage import fail_usage

        fail_usage(Console(stderr=True), "; ".join(malformed))


def _explain(target: str) -> None:
    """``--explain``: the profile choice and the measured knobs; exit 2 if it cannot load."""
    from ..profiles.explain import explain
    from ..usage import fail_usage

    console = Console()
    try:
        explain(console, target)
    except (TargetLoadError, KeyError) as exc:
        fail_usage(console, str(exc.args[0] if isinstance(exc, KeyError) else exc))


def _latest(as_json: bool) -> None:
    """``--latest``: a row per engine on the index; exit 2 when none got an answer."""
    import json

    from ..usage import fail_usage
    from .releases.latest import all_unknown, latest_rows

    console = Console()
    progress = Console(stderr=True)
    entries, broken, _ = _entries()
    rows = latest_rows(
        entries, progress=lambda text: progress.print(text, markup=False, highlight=False)
    )
    if as_json:
        click.echo(json.dumps([row.as_dict() for row in rows], indent=2))
    else:
        table = Table(title="newest releases on the package index (kvpool targets --latest)")
        columns = ("engine", "newest release", "supported", "result", "profile", "what is missing")
        for column in columns:
            # names never wrap; the rest wraps, a long word folded, never cut
            names = column in ("engine", "newest release")
            table.add_column(column, no_wrap=names, overflow="fold")
        for row in rows:
            profile = row.profile if not row.reason else f"{row.profile}: {row.reason}"
            result = row.result + (f": {', '.join(row.rules)}" if row.rules else "")
            table.add_row(
                row.engine, row.newest, row.supported, result, profile, row.missing or "-"
            )
        for name, why in broken:
            table.add_row(name, "-", "unknown", "-", "-", why)
        console.print(table)
    if all_unknown(rows):
        fail_usage(
            Console(stderr=True),
            "the package index answered about no engine (offline, or pip's index is "
            f"unreachable): {rows[0].missing}",
        )


def _entries() -> tuple[list[EngineEntry], list[tuple[str, str]], list[str]]:
    """Every registered engine that loads, those that do not with the reason, and the
    messages of the malformed ones (a usage error once the others are listed)."""
    entries, broken, malformed = [], [], []
    for name in sorted(registered(), key=lambda n: (n not in ("impl", "spec"), n)):
        try:
            entries.append(engine(name))
        except TargetLoadError as exc:
            broken.append((name, f"unavailable: {str(exc).splitlines()[0]}"))
            if isinstance(exc, MalformedEngineEntry):
                malformed.append(str(exc))
    return entries, broken, malformed


def _listed(entry: EngineEntry) -> tuple[str, ...]:
    """The targets of ``entry`` described by default: its known releases if it has
    releases (none yet: nothing), else its name."""
    if Form.RELEASE in entry.accepted:
        return tuple(f"{entry.name}=={v}" for v in entry.versions())
    return (entry.name,)


def _print_vllm_offers(console: Console) -> None:
    from ..engines.vllm.entry import ENTRY as VLLM
    from ..engines.vllm.manager_loading import manager_offer

    offers = Table(title="vLLM releases in the cache: --manager vllm", show_header=False)
    offers.add_column("release", no_wrap=True)
    offers.add_column("offers it")
    for version in VLLM.versions():
        offers.add_row(f"vllm=={version}", manager_offer(version))
    console.print(offers)


def _describe_manager(entry: EngineEntry) -> str:
    """A manager-only engine's description: what it loads (its version), or why not."""
    try:
        factory, _ = load_manager(entry.name, entry.name)
    except TargetLoadError as exc:
        return f"{entry.manager_summary}; unavailable: {str(exc).splitlines()[0]}"
    return f"{getattr(factory, 'name', entry.name)}: {entry.manager_summary}"


def _describe_target(name: str) -> tuple[str, str, str, frozenset[str] | str]:
    """A target's name, version, default profile and actions (or why it is unavailable)."""
    from ..trace.save import kvpool_version

    try:
        profile = choose_profile(name).name
        factory, _ = load_target(name)
        probe = factory(PoolConfig(2), get_profile(profile))
    except Exception as exc:  # not installed, not downloadable: say so in the table
        return name, "", "", f"unavailable: {exc}".splitlines()[0]
    version = getattr(probe, "version", None) or (
        kvpool_version() if name in ("impl", "spec") else ""
    )
    offered = get_profile(profile).operations | {EVICT_FIRST}
    operations = probe.operations & offered
    return name, str(version), profile, frozenset(operations)
