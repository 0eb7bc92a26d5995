"""Which findings targets publish KV events: the one answer the findings page
(``findings/collect.py``) and the events contract page's target x consumer table both
use, so one cannot say "passes" where the other says "no events".

A target that publishes no events has no events run at all, so its findings folder holds
no events trace; without this answer a table reading only the traces would count the
missing traces as a pass.
"""

from __future__ import annotations

from kvpool.conformance.targets.loading import choose_profile
from kvpool.spec import get_profile

#: Managers with no pool API of their own: only their requests/manager run (SGLang from
#: 0.5 on runs at the engine machine only, which leaves no trace here when it passes).
SGLANG = frozenset({"sglang==0.4.6.post5", "sglang==0.4.6.post5,page=drawn"})
MANAGER_ONLY = frozenset({"nanovllm", "nanovllm-fork", *SGLANG})
#: Managers that publish their own KV events: the events level judges their manager run
#: (``--machine requests --level events``; traces ``requests-manager-CONSUMER-KIND``).
MANAGER_EVENTS = SGLANG


def publishes_events(target: str) -> bool:
    """Whether the events level runs on ``target`` (a ``--target`` spelling): a manager-only
    target when it publishes its own events, any other when its profile offers
    ``take_events``."""
    if target in MANAGER_ONLY:
        return target in MANAGER_EVENTS
    return get_profile(choose_profile(target).name).offers("take_events")
