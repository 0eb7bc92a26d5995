"""What two pools have in common: the actions both take and what both show of their state.

Actions both sides offer are drawn and compared. An action one side's pool takes and the
other's pool lacks is drawn too (inside the contract of the side that takes it), and taking
it is a difference: a caller written for one pool breaks on the other. With ``shared_only``
such actions are left out instead. An action a side's *profile* leaves out (the contract
chosen for the run) is never drawn. Only what both show is compared; everything else is
listed with the side that lacks it, so a reader knows what the diff did not look at. A
side offers an operation when its target has it and its profile includes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpool.spec import ALL_ACTIONS, Profile

from ...machines.pool.target import EVICT_FIRST, OBSERVABLES, Target

#: Every operation in display order, ``free_blocks(evict_first)`` beside ``free_blocks``.
OPERATIONS: tuple[str, ...] = tuple(
    op
    for action in ALL_ACTIONS
    for op in (
        (action.operation, EVICT_FIRST)
        if action.operation == "free_blocks"
        else (action.operation,)
    )
)

#: Observables the two pools are compared on (``structure`` is each pool's own check of
#: its free-list links, run on whichever side shows it).
COMPARED = tuple(o for o in OBSERVABLES if o != "structure")


def label(operation: str) -> str:
    """How an operation is named in output: ``free_blocks(evict_first)`` for the flag."""
    return "free_blocks(evict_first)" if operation == EVICT_FIRST else operation


def offered(target: Target, profile: Profile) -> frozenset[str]:
    """The operations ``target`` takes that ``profile`` includes."""
    ops = target.operations & profile.operations
    if EVICT_FIRST in target.operations and profile.has_evict_first:
        ops |= {EVICT_FIRST}
    return frozenset(ops)


@dataclass(frozen=True)
class Side:
    """One of the two pools: how it was named, and what it offers."""

    #: ``A`` or ``B``.
    letter: str
    #: The target as given on the command line (``vllm==0.24.0``, ``impl``, ...).
    spec: str
    profile: Profile
    operations: frozenset[str]
    observes: frozenset[str]
    version: str | None = None

    def why_not(self, operation: str, target_operations: frozenset[str]) -> str:
        if operation not in target_operations:
            return f"{self.letter} ({self.spec}) lacks it"
        return f"{self.letter}'s profile {self.profile.name} leaves it out"


@dataclass(frozen=True)
class CommonGround:
    """The actions drawn and the observables compared, and what was left out and why."""

    operations: frozenset[str]
    observes: frozenset[str]
    #: (operation label, why) for every operation one side offers and the other does not.
    left_out: tuple[tuple[str, str], ...]
    #: (observable, why) for every observable one side shows and the other does not.
    not_compared: tuple[tuple[str, str], ...]
    #: operation -> (the letter of the side that takes it, why the other does not): drawn,
    #: and a difference when taken (the other side's pool lacks it).
    one_sided: tuple[tuple[str, str, str], ...] = ()

    def taken_by_one(self, operation: str) -> tuple[str, str] | None:
        """``(side, why the other lacks it)`` when only one side's pool takes ``operation``."""
        for op, side, why in self.one_sided:
            if op == operation:
                return side, why
        return None

    @property
    def evict_first(self) -> bool:
        return EVICT_FIRST in self.operations

    @property
    def peer(self) -> bool:
        return "peer_get_new_blocks" in self.operations

    def drawn(self) -> list[str]:
        """The drawn operations, by name, in display order."""
        return [label(op) for op in OPERATIONS if op in self.operations]


def common_ground(
    a: Side,
    b: Side,
    a_target_ops: frozenset[str],
    b_target_ops: frozenset[str],
    shared_only: bool = False,
) -> CommonGround:
    """What A and B share; ``*_target_ops`` are the targets' own operations (to say whether
    a side lacks an operation or only its profile leaves it out). Unless ``shared_only``,
    an operation one side offers and the other's pool lacks is drawn (:attr:`one_sided`)."""
    left_out = []
    one_sided = []
    for op in OPERATIONS:
        in_a, in_b = op in a.operations, op in b.operations
        if in_a == in_b:
            continue
        taker, other, other_ops = (a, b, b_target_ops) if in_a else (b, a, a_target_ops)
        why = other.why_not(op, other_ops)
        if op in other_ops or shared_only:  # the other's profile leaves it out, or asked so
            left_out.append((label(op), why))
        else:
            one_sided.append((op, taker.letter, why))
    not_compared = []
    for seen in COMPARED:
        if (seen in a.observes) != (seen in b.observes):
            lacking = b if seen in a.observes else a
            not_compared.append((seen, f"{lacking.letter} ({lacking.spec}) does not show it"))
    return CommonGround(
        (a.operations & b.operations) | {op for op, _, _ in one_sided},
        (a.observes & b.observes) - {"structure"},
        tuple(left_out),
        tuple(not_compared),
        tuple(one_sided),
    )
