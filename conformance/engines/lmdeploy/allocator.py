"""LMDeploy's ``LogicalAllocator`` driven as a pool without a prefix cache.

The allocator hands out logical block ids (numpy arrays), counts references on them and
keeps a physical allocator in step (each logical block maps to a physical one). It has no
keys, no lookup and no events: its prefix cache (``BlockTrie``) is a separate layer above
it that holds its own references through ``add_ref_count``. So the adapter offers the
spec's allocation operations only:

=====================  ==================================================================
spec action            ``LogicalAllocator`` call
=====================  ==================================================================
``GetNewBlocks(n)``    ``allocate(n, 'gpu')``
``FreeBlocks(ids)``    ``free(np.array(ids))``
``Touch(ids)``         ``update_access_time(ids)`` then ``add_ref_count(ids, 1)``: what
                       the trie does to the blocks of a prefix hit
``GetNumFreeBlocks``   ``get_num_free_blocks()``
=====================  ==================================================================

**Ids.** The allocator has no null block: every id ``0 … n-1`` can be handed out. It is
built with ``num_gpu_blocks = N - 1`` (no CPU blocks, none reserved) and the spec's block
``b`` (1 … N-1) is LMDeploy's logical block ``b - 1``; the spec's null block 0 is none of
its blocks, so a call that lists it leaves it out (the spec skips it too). Ids outside the
pool are passed on as they are (``N`` becomes ``N - 1``, past the allocator's end).

**What it shows** (read off its arrays, private fields named): the free list in reuse order
(``_free_blocks[num_blocks - _free_count:]``: ``allocate`` takes from its front and
``free`` writes the freed blocks back just ahead of it, in the order given), the logical
ref counts, and its structure: the free count in range, no block listed twice, every
listed block at count 0 and no count below 0, and the physical allocator in step (as many
free physical blocks as logical ones, no two held logical blocks on one physical block,
none on a free one).
"""

from __future__ import annotations

from typing import Any

from kvpool.spec import (
    NULL_BLOCK,
    Action,
    FreeBlocks,
    GetNewBlocks,
    GetNumFreeBlocks,
    Observation,
    PoolConfig,
    Profile,
    Touch,
)
from kvpool.spec.profile import LMDEPLOY

from ...machines.pool.target import PoolView
from .release import LmdeployRelease, numpy_module

OPERATIONS = LMDEPLOY.operations
OBSERVES = frozenset({"free_queue", "ref_cnt", "structure"})


def lmdeploy_id(block: int) -> int:
    """LMDeploy's logical id of the spec's block ``block`` (not the null block)."""
    return block - 1


def spec_id(logical: int) -> int:
    return int(logical) + 1


class LmdeployAllocatorTarget:
    """Drives one ``LogicalAllocator`` with the spec's actions."""

    operations = OPERATIONS
    observes = OBSERVES

    def __init__(self, release: LmdeployRelease, config: PoolConfig, profile: Profile) -> None:
        self.np = numpy_module("allocator")
        self.version = release.version
        self.name = f"lmdeploy=={release.version}"
        self.config = config
        self.profile = profile
        self.num_blocks = config.num_gpu_blocks - 1
        self.allocator: Any = release.LogicalAllocator(
            num_cpu_blocks=0, num_gpu_blocks=self.num_blocks
        )

    def _ids(self, blocks: tuple[int, ...]) -> Any:
        """The logical ids of ``blocks``, the null block left out, as the allocator takes
        them (an int64 array)."""
        kept = [lmdeploy_id(b) for b in blocks if b != NULL_BLOCK]
        return self.np.array(kept, dtype=self.np.int64)

    def apply(self, action: Action) -> Observation:
        allocator = self.allocator
        match action:
            case GetNewBlocks(num_blocks=n):
                got = allocator.allocate(n, "gpu")
                return Observation(tuple(spec_id(b) for b in got))
            case FreeBlocks(blocks=ids, evict_first=evict_first, foreign=foreign):
                if evict_first or foreign:
                    raise NotImplementedError("LMDeploy's free has no evict_first and no peer")
                allocator.free(self._ids(ids))
                return Observation()
            case Touch(blocks=ids):
                logical = self._ids(ids)
                allocator.update_access_time(logical)
                allocator.add_ref_count(logical, 1)
                return Observation()
            case GetNumFreeBlocks():
                return Observation(int(allocator.get_num_free_blocks()))
        raise NotImplementedError(f"LMDeploy's allocator has no counterpart of {action.operation}")

    # --- looking inside -----------------------------------------------------------------

    def _free_list(self) -> list[int] | None:
        """The logical free list in reuse order; ``None`` if the count is out of range."""
        count = int(self.allocator._free_count)
        if not 0 <= count <= self.num_blocks:
            return None
        return [int(b) for b in self.allocator._free_blocks[self.num_blocks - count :]]

    def view(self) -> PoolView:
        free = self._free_list()
        counts = self.allocator._log_mem.ref_count
        return PoolView(
            free_count=int(self.allocator.get_num_free_blocks()),
            free_queue=None if free is None else tuple(spec_id(b) for b in free),
            ref_cnt=(0, *(int(c) for c in counts)),
        )

    def structure_problems(self) -> list[str]:
        return allocator_problems(self.allocator, self.num_blocks)


def allocator_problems(allocator: Any, n: int) -> list[str]:
    """The structure of a ``LogicalAllocator`` over ``n`` GPU blocks (no CPU blocks): the
    free count in range, no block listed twice, listed blocks at count 0, no count below
    0, and the physical allocator in step."""
    count = int(allocator._free_count)
    if not 0 <= count <= n:
        return [f"the free count is {count}, outside 0..{n}"]
    problems: list[str] = []
    free = [int(b) for b in allocator._free_blocks[n - count :]]
    counts = [int(c) for c in allocator._log_mem.ref_count]
    for b in sorted({b for b in free if free.count(b) > 1}):
        problems.append(f"block {spec_id(b)} is in the free list {free.count(b)} times")
    for b in sorted(set(free)):
        if counts[b] != 0:
            problems.append(f"block {spec_id(b)} is in the free list with ref count {counts[b]}")
    for b, c in enumerate(counts):
        if c < 0:
            problems.append(f"block {spec_id(b)} has ref count {c}")
    gpu = allocator.get_phy_allocator("gpu")
    if int(gpu.get_num_free_blocks()) != count:
        problems.append(
            f"{int(gpu.get_num_free_blocks())} physical blocks free but {count} logical ones"
        )
    phy_free = {int(p) for p in gpu._free_blocks[n - int(gpu._free_count) :]}
    held = [b for b, c in enumerate(counts) if c > 0]
    owner: dict[int, int] = {}
    for b in held:
        p = int(allocator._log_mem.phy_map[b])
        if p in owner:
            problems.append(
                f"blocks {spec_id(owner[p])} and {spec_id(b)} are both on physical block {p}"
            )
        owner[p] = b
        if p in phy_free:
            problems.append(f"block {spec_id(b)} is held on physical block {p}, which is free")
    return problems


def lmdeploy_allocator_target(
    release: LmdeployRelease, config: PoolConfig, profile: Profile
) -> LmdeployAllocatorTarget:
    return LmdeployAllocatorTarget(release, config, profile)
