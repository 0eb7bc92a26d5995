"""Which findings targets publish KV events: the one answer the findings page
(``findings/collect.py``) and the events contract page's target x consumer table both
use, so one cannot say "passes" where the other says "no events".

A target that publishes no events has no events run at all, so its findings folder holds
no events trace; without this answer a table reading only the traces would count the
missing traces as a pass.
"""

from __future__ import annotations

from kvpool.conformance.targets.loading import choose_profile, described
from kvpool.spec import get_profile

#: Managers with no pool API of their own: only their requests/manager run.
MANAGER_ONLY = frozenset({"nanovllm", "nanovllm-fork"})
#: Engines with neither a pool nor a manager API, checked at the engine machine only
#: (SGLang's scheduler): their KV events are judged there (``--machine engine``, traces
#: ``engine-scheduler-CONSUMER-KIND.engine.itf.json``).
ENGINE_ONLY = frozenset({"sglang"})


def engine_only(target: str) -> bool:
    """Whether ``target`` (a ``--target`` spelling) is checked at the engine machine only."""
    return described(target).engine in ENGINE_ONLY


def publishes_events(target: str) -> bool:
    """Whether the events are judged on ``target`` (a ``--target`` spelling): an
    engine-only target's at the engine machine (its scheduler publishes them), a
    manager-only target's never (none publishes events), any other's when its profile
    offers ``take_events``."""
    if engine_only(target):
        return True
    if target in MANAGER_ONLY:
        return False
    return get_profile(choose_profile(target).name).offers("take_events")
