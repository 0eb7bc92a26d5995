"""``kvpool targets``: what can be checked, the actions each target takes, the managers
and the profiles."""

from __future__ import annotations

import click
from kvpool.spec import PROFILES, PoolConfig, get_profile
from rich.console import Console
from rich.table import Table

from ..engine.target import EVICT_FIRST
from .loading import (
    BUILT_IN,
    BUILT_IN_MANAGERS,
    VLLM_SPECS,
    TargetLoadError,
    default_profile,
    load_manager,
    load_target,
)


@click.command()
@click.option(
    "--target",
    "-t",
    "extra",
    multiple=True,
    help="Also describe this target (repeatable), e.g. vllm==0.24.0 (downloaded if needed).",
)
@click.option(
    "--explain",
    metavar="TARGET",
    default=None,
    help="Only say which profile TARGET is judged by and why (its version, or for a vLLM "
    "clone naming none, its code), with every knob measured on it beside the profile's.",
)
def targets(extra: tuple[str, ...], explain: str | None) -> None:
    """The targets that can be checked, the actions each one takes, the managers and the
    profiles. vLLM releases already in the cache are described too."""
    from kvpool.spec import ALL_ACTIONS

    if explain is not None:
        _explain(explain)
        return

    from .engines import ENGINE_SPECS
    from .engines import LISTED as ENGINE_LISTED
    from .engines import MANAGERS as ENGINE_MANAGERS
    from .vllm.wheel import cache_root, valid_cache

    console = Console()
    forms = Table(title="targets (--target)", show_header=False)
    forms.add_column("target", no_wrap=True)
    forms.add_column("what it is")
    for name, (_, description) in BUILT_IN.items():
        forms.add_row(name, description)
    for form, description in VLLM_SPECS.items():
        forms.add_row(form, description)
    for form, description in ENGINE_SPECS.items():
        forms.add_row(form, description)
    forms.add_row("module:factory", "your own pool (see kvpool conform --help)")
    console.print(forms)
    cached = sorted(
        (d.name for d in (cache_root() / "vllm").glob("*") if valid_cache(d, d.name)),
        key=_version_key,
    )
    described: list[tuple[str, str, str, frozenset[str] | str]] = []
    for name in [*BUILT_IN, *(f"vllm=={v}" for v in cached), *ENGINE_LISTED, *extra]:
        described.append(_describe_target(name))
    matrix = Table(title="actions each target takes (profile: the default --profile)")
    matrix.add_column("action", no_wrap=True)
    for name, version, profile, _ in described:
        matrix.add_column(f"{name}\n{version}\n{profile}", justify="center")
    rows = [(a.operation, a.operation) for a in ALL_ACTIONS]
    rows.insert(2, ("free_blocks(evict_first)", EVICT_FIRST))
    for label, operation in rows:
        marks = [
            ("yes" if operation in ops else "-") if isinstance(ops, frozenset) else "?"
            for _, _, _, ops in described
        ]
        matrix.add_row(label, *marks)
    console.print(matrix)
    for name, _, _, ops in described:
        if isinstance(ops, str):
            console.print(f"  {name}: {ops}", markup=False, highlight=False, soft_wrap=True)
    managers = Table(title="managers (--manager, the requests machine)", show_header=False)
    managers.add_column("manager", no_wrap=True)
    managers.add_column("what it is")
    for name, (_, description) in BUILT_IN_MANAGERS.items():
        managers.add_row(name, description)
    from .vllm.manager_loading import DESCRIPTION, manager_offer

    managers.add_row("vllm", DESCRIPTION)
    managers.add_row(
        "lmdeploy",
        "the DefaultBlockManager with its BlockTrie of the LMDeploy release --target names "
        "(what --manager auto runs on an LMDeploy target; needs the lmdeploy extra: numpy)",
    )
    for name in ENGINE_MANAGERS:
        managers.add_row(name, _describe_manager(name))
    managers.add_row("module:factory", "your own manager target, from (setup, profile)")
    console.print(managers)
    offers = Table(title="vLLM releases in the cache: --manager vllm", show_header=False)
    offers.add_column("release", no_wrap=True)
    offers.add_column("offers it")
    for version in cached:
        offers.add_row(f"vllm=={version}", manager_offer(version))
    console.print(offers)
    profiles = Table(title="profiles (--profile)", show_header=False)
    profiles.add_column("profile", no_wrap=True)
    profiles.add_column("what it captures")
    for known in PROFILES.values():
        profiles.add_row(known.name, known.description)
    console.print(profiles)


def _explain(target: str) -> None:
    """``--explain``: the profile choice and the measured knobs; exit 2 if it cannot load."""
    from ..profiles.explain import explain
    from ..usage import fail_usage

    console = Console()
    try:
        explain(console, target)
    except (TargetLoadError, KeyError) as exc:
        fail_usage(console, str(exc.args[0] if isinstance(exc, KeyError) else exc))


def _describe_manager(name: str) -> str:
    """A manager-only target's description: what it loads (its version), or why not."""
    from .engines import ENGINE_SPECS

    try:
        factory, _ = load_manager(name, name)
    except TargetLoadError as exc:
        return f"{ENGINE_SPECS[name]}; unavailable: {str(exc).splitlines()[0]}"
    return f"{getattr(factory, 'name', name)}: {ENGINE_SPECS[name]}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def _describe_target(name: str) -> tuple[str, str, str, frozenset[str] | str]:
    """A target's name, version, default profile and actions (or why it is unavailable)."""
    from ..trace.save import kvpool_version

    try:
        profile = default_profile(name) or "seed"
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
