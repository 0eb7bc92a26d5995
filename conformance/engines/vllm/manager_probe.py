"""The knob of a vLLM release's manager that its pool cannot show: where a sliding-window
group sends the blocks without a key it frees (``window_unkeyed_free_first``).

vLLM 0.23's ``SlidingWindowManager`` frees a request's cached blocks as usual and then its
uncached ones with ``free_blocks(..., prepend=True)``, so scratch blocks are reused first.
That is the manager's choice, not the pool's, so the probe drives the release's own
manager: one request of one token in a sliding-window group, admitted and finished. Its one
block has no key; a pool that frees such a block to the back (the precondition for the
probe to tell anything) puts it at the front only if the manager asked for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpool.spec import PoolConfig, get_profile
from kvpool.spec.manager import KVGroup, ManagerConfig

from ...machines.requests.target import RequestSetup
from ...profiles.probes import Measurement

if TYPE_CHECKING:
    from ...targets.description import TargetDescription

KNOB = "window_unkeyed_free_first"
#: One sliding-window group of two 4-token blocks over a pool of four real blocks.
PROBE_SETUP = RequestSetup(
    ManagerConfig(block_size=4, groups=(KVGroup(sliding_window_blocks=2),)),
    PoolConfig(num_gpu_blocks=5, enable_caching=True, hash_block_size=4),
)


def decided_by_pool(pool: list[Measurement]) -> Measurement | None:
    """The knob's value where the pool's own knobs settle it: without ``evict_first`` no
    manager can free to the front; where the pool already frees blocks without a key to the
    front, a manager's asking for it cannot show (and changes nothing)."""
    by_knob = {m.knob: m.value for m in pool}
    if by_knob.get("has_evict_first") is False:
        return Measurement(KNOB, False, "free_blocks has no prepend: no manager frees to the front")
    if by_knob.get("unkeyed_free_to_front") is True:
        return Measurement(
            KNOB, False, "the pool frees blocks without a key to the front itself: not stated"
        )
    return None


def window_unkeyed_free_first(
    description: TargetDescription, profile_name: str, pool: list[Measurement]
) -> Measurement:
    """The knob measured on the manager of the release ``description`` names (judged by
    profile ``profile_name``), or settled by the ``pool``'s measured knobs."""
    settled = decided_by_pool(pool)
    if settled is not None:
        return settled
    from .entry import distribution_of, package_of
    from .manager_loading import load_vllm_manager
    from .naming import VllmLoadError

    try:
        factory, _ = load_vllm_manager(
            description, distribution_of(description), package_of(description)
        )
    except VllmLoadError as exc:
        return Measurement(KNOB, None, f"its manager cannot be loaded: {exc}")
    setup = getattr(factory, "fit_setup", lambda drawn: drawn)(PROBE_SETUP)
    manager = factory(setup, get_profile(profile_name))
    manager.admit("probe", (1,), None)
    before = manager.view().free_queue
    manager.finish("probe")
    after = manager.view().free_queue
    if before is None or after is None or len(after) != len(before) + 1:
        return Measurement(KNOB, None, "its free queue is not shown")
    freed = next(b for b in after if b not in before)
    if after[0] == freed:
        return Measurement(KNOB, True, f"a finished window's block {freed} went to the front")
    if after[-1] == freed:
        return Measurement(KNOB, False, f"a finished window's block {freed} went to the back")
    return Measurement(KNOB, None, f"a finished window's block {freed} went mid-queue: {after}")
