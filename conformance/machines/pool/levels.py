"""How strict a run is, and which machines a run can draw from."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .expectations import Expectations


@dataclass(frozen=True)
class Level:
    name: str
    description: str
    #: Compare the exact eviction order (else the spec adopts the target's choice).
    exact_order: bool
    #: Also draw out-of-contract actions, which the target must refuse unchanged.
    out_of_contract: bool
    #: The events level: the consumer model (``count`` or ``set``, see
    #: :mod:`kvpool.spec.consumer`) fed the target's KV events after every step.
    consumer: str | None = None
    #: The target's known findings (``--expect``): met, they are counted and the run goes
    #: on past them (see :mod:`.expectations`).
    expected: Expectations | None = field(default=None, compare=False)


SAFETY = Level(
    "safety",
    "set semantics: blocks come from the free set, counts and keys agree, "
    "nothing is lost or handed out twice; any eviction order passes",
    exact_order=False,
    out_of_contract=False,
)
ORDER = Level(
    "order", "the exact eviction order of the profile", exact_order=True, out_of_contract=False
)
ROBUSTNESS = Level(
    "robustness",
    "out-of-contract input is refused with a clear error and "
    "leaves the pool unchanged (compared with set semantics)",
    exact_order=False,
    out_of_contract=True,
)

EVENTS = Level(
    "events",
    "the target's KV events, taken after every step, fed to a consumer model (count or "
    "set): what it rebuilds must match the pool's keys, every parent and removal placeable",
    exact_order=False,
    out_of_contract=False,
    consumer="count",
)

LEVELS: dict[str, Level] = {lv.name: lv for lv in (SAFETY, ORDER, ROBUSTNESS, EVENTS)}


def level_for(name: str, consumer: str | None = None) -> Level:
    """The level called ``name``; for ``events``, judged by the ``consumer`` model (the
    level's default, ``count``, when none is given)."""
    level = LEVELS[name]
    if level.consumer is None or consumer is None:
        return level
    return replace(level, consumer=consumer)


#: The machines: ``pool`` (pool actions, at each level) and ``requests`` (request actions
#: through a KV cache manager, on the pool and on the target's own manager).
MACHINES = ("pool", "requests")
#: Request-level pools are drawn up to at least this many blocks: requests need room.
REQUEST_MIN_BLOCKS = 12
