"""Profiles: the policy knobs that real pools disagree on.

The contract of SEMANTICS.md is the ``seed`` profile (upstream vLLM at the seed's commit).
Released pools differ in a few places (where a freed block goes, which API exists); each
such difference is one field here, so a profile is a readable list of choices.
"""

from __future__ import annotations

from dataclasses import dataclass

from .actions import ALL_ACTIONS


@dataclass(frozen=True)
class Profile:
    """Where a profile's pool departs from the seed, field by field."""

    name: str
    description: str
    #: A block with no key reaching ref_cnt 0 goes to the queue's front (LIFO reuse).
    unkeyed_free_to_front: bool = True
    #: With caching off, every freed block goes to the front.
    caching_off_free_to_front: bool = True
    #: ``free_blocks`` has the ``evict_first`` argument.
    has_evict_first: bool = True
    #: Operations this pool offers (by ``Action.operation``).
    operations: frozenset[str] = frozenset(a.operation for a in ALL_ACTIONS)

    def offers(self, operation: str) -> bool:
        """Whether this profile's pool has ``operation``."""
        return operation in self.operations


SEED = Profile(
    name="seed",
    description="upstream vLLM at the seed's commit (ef9339e): evict_first, unpin_blocks, "
    "weak pool references; unkeyed frees to the front, keyed frees to the back",
)

PROFILES: dict[str, Profile] = {SEED.name: SEED}


def get_profile(name: str) -> Profile:
    """The profile called ``name``; ``KeyError`` names the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise KeyError(f"unknown profile {name!r}; known profiles: {known}") from None
