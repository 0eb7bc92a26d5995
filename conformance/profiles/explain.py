"""``kvpool targets --explain TARGET``: which profile a target is judged by, why, and what
its code measures, knob by knob, beside that profile's values."""

from __future__ import annotations

from kvpool.spec import get_profile
from rich.console import Console
from rich.table import Table

from .probes import Measurement, measure


def shown(value: object) -> str:
    """A knob's value for a table: operation sets by what they lack or add."""
    if isinstance(value, frozenset):
        return ", ".join(sorted(value)) or "(none)"
    return "undecided" if value is None else str(value)


def target_measurements(target: str) -> tuple[str, str, list[Measurement]]:
    """The profile ``target`` is judged by unless ``--profile`` says otherwise, why, and
    every knob measured on it."""
    from ..engines.vllm.entry import VllmEntry, load_vllm
    from ..engines.vllm.profile_choice import measure_release
    from ..targets.loading import choose_profile, described, entry_of, load_target

    description = described(target)
    choice = choose_profile(description)
    if isinstance(entry_of(description), VllmEntry):
        from ..engines.vllm.manager_probe import window_unkeyed_free_first

        measured = measure_release(load_vllm(description))
        measured.append(window_unkeyed_free_first(description, choice.name, measured))
    else:
        measured = measure(load_target(description)[0])
    return choice.name, f"profile {choice.name}: {choice.reason}", measured


def explain(console: Console, target: str) -> None:
    """Print the choice and the measurements as a table (raises what loading raises)."""
    if not console.is_terminal:  # a log or a pipe: room for the evidence column
        console.width = max(console.width, 140)
    name, why, measured = target_measurements(target)
    profile = get_profile(name)
    console.print(f"{target}: {why}", markup=False, highlight=False, soft_wrap=True)
    table = Table(title=f"knobs measured on {target}, beside profile {profile.name}")
    table.add_column("knob", no_wrap=True)
    for column in ("measured", f"{profile.name} says", "agrees", "what the pool did"):
        table.add_column(column)
    for m in measured:
        says = getattr(profile, m.knob)
        if isinstance(says, frozenset) and isinstance(m.value, frozenset):
            extra, lacking = sorted(m.value - says), sorted(says - m.value)
            value = (
                "as the profile"
                if m.value == says
                else (f"+{', '.join(extra)} -{', '.join(lacking)}")
            )
            agrees = "yes" if m.value == says else "NO"
            table.add_row(m.knob, value, "(its list)", agrees, m.evidence)
            continue
        agrees = "?" if m.value is None else ("yes" if m.value == says else "NO")
        table.add_row(m.knob, shown(m.value), shown(says), agrees, m.evidence)
    console.print(table)
