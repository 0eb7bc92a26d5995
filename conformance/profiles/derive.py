"""``kvpool profile derive``: a profile file written from measurements.

The file is the kind ``--profile FILE`` reads (:mod:`kvpool.spec.profile`): based on
``seed``, one ``[knobs.NAME]`` table per knob measured to differ from the seed, its reason
the probe's evidence. A knob no probe could decide keeps the seed's value and is marked in
a comment (``# undecided: ...``), as are the knobs no probe can measure: what a release
*promises* its event subscribers is written in its documents, not shown by its pool, and
how a KV cache manager above the pool keys blocks is the manager's design.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from kvpool.spec import SEED
from kvpool.spec.profile import knob_names

from .probes import Measurement

#: Knobs that state a written promise, never measured.
WRITTEN = ("consumer_contract", "consumer_contract_source")
#: Knobs of a KV cache manager's design, which no probe of a pool can show.
MANAGER_DESIGN = ("scheduled_keys_within_pass",)


def _toml(value: object) -> str:
    """A TOML literal for a bool, a string or a list of strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # TOML's basic strings take JSON's escapes
    if isinstance(value, Iterable):
        return "[" + ", ".join(json.dumps(v) for v in sorted(value)) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _knob_table(m: Measurement) -> list[str]:
    lines = [f"[knobs.{m.knob}]"]
    seed = getattr(SEED, m.knob)
    if isinstance(seed, frozenset) and isinstance(m.value, frozenset):
        if m.value - seed:
            lines.append(f"add = {_toml(m.value - seed)}")
        if seed - m.value:
            lines.append(f"remove = {_toml(seed - m.value)}")
    else:
        lines.append(f"value = {_toml(m.value)}")
    lines.append(f"reason = {_toml('measured: ' + m.evidence)}")
    return [*lines, ""]


def profile_document(target: str, measured: list[Measurement]) -> str:
    """The TOML text of the profile ``measured`` states for ``target``."""
    by_knob = {m.knob: m for m in measured}
    lines = [
        f"# Derived by kvpool profile derive --target {target}: every knob probed on the",
        "# pool; the knobs below differ from the seed's, each with what the pool did.",
    ]
    for knob in knob_names():
        m = by_knob.get(knob)
        if knob in WRITTEN:
            lines.append(f"# not measured: {knob} (a written promise); kept from the seed")
        elif knob in MANAGER_DESIGN:
            lines.append(f"# not measured: {knob} (a manager's design); kept from the seed")
        elif m is None or m.value is None:
            why = "no probe" if m is None else m.evidence
            lines.append(f"# undecided: {knob} ({why}); kept from the seed")
    lines += [
        'base = "seed"',
        f"description = {_toml(f'{target}, as kvpool profile derive measured it')}",
        "",
    ]
    for knob in knob_names():
        m = by_knob.get(knob)
        if m is not None and m.value is not None and m.value != getattr(SEED, knob):
            lines += _knob_table(m)
    return "\n".join(lines).rstrip() + "\n"
