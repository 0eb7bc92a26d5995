"""The upstream vLLM reports an events-level finding can match, and how one is recognised."""

from __future__ import annotations

import re

from ...trace.model import TraceMeta

#: Upstream report number -> (what it reports, its link).
UPSTREAM: dict[int, tuple[str, str]] = {
    55092: (
        "a set consumer drops a prefix when one of two copies is evicted",
        "https://github.com/vllm-project/vllm/pull/55092",
    ),
    49125: (
        "a stale partial hash stored again after full-block promotion",
        "https://github.com/vllm-project/vllm/issues/49125",
    ),
    58119: (
        "partial-cache BlockStored events name a parent hash never reported",
        "https://github.com/vllm-project/vllm/issues/58119",
    ),
    57296: (
        "AllBlocksCleared published on a reset the consumer cannot tell apart",
        "https://github.com/vllm-project/vllm/pull/57296",
    ),
}


def broken_property(message: str) -> str | None:
    """The events property a finding's message names, if any."""
    found = re.search(r"property '(events-[a-z-]+)'", message)
    return found.group(1) if found else None


def upstream_report(meta: TraceMeta) -> int | None:
    """The upstream report an events finding matches, read off what it broke and where: a
    set consumer losing a hash whose copies remain, or told to remove one it already lost
    (55092); a partial entry's store naming a parent nobody was told of (58119)."""
    prop = broken_property(meta.message)
    if meta.consumer is None or prop is None:
        return None
    operation = meta.message.removeprefix("after ").split(":")[0]
    if meta.consumer == "set" and prop in ("events-replay-index", "events-removed-known"):
        return 55092
    if prop == "events-parent-known" and operation == "cache_partial_block":
        return 58119
    return None


def report_link(number: int) -> str:
    """``[#N](link)`` for a report of :data:`UPSTREAM`."""
    return f"[#{number}]({UPSTREAM[number][1]})"
