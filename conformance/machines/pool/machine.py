"""Drawing the pool machine's test cases for a :class:`~.lockstep.LockstepRun`.

Each step draws the next kind of action (weighted towards the ones that build state) from
the spec's current state, then the action itself; the run applies it to the spec and the
target and compares. :func:`pool_case` is a test case of the seeded search
(:mod:`.seeded_search`), which ``kvpool conform`` runs and ``kvpool fuzz`` seeds from
Hypothesis; ``kvpool diff``'s Hypothesis machine draws with :func:`next_action` too.
Drawing only finds failures: :mod:`.shrink` minimises them by replaying actions, which is
much faster than shrinking Hypothesis's choice sequence.
"""

from __future__ import annotations

from collections.abc import Callable

from kvpool.spec import Action, PoolState, Profile, violation

from ...search.choices import Choices, RandomChoices
from ...search.seeded_search import Start, Step
from ..events.caller import manager_could_call
from . import draw
from . import operations as table
from .draw_facts import facts
from .levels import Level
from .lockstep import LockstepRun, RunRecord
from .lookahead import Lookahead, Reach
from .target import PLAN, TargetFactory


def kinds(
    state: PoolState, ctx: draw.Context, operations: frozenset[str], level: Level
) -> tuple[tuple[str, int], ...]:
    """The operations that can be drawn now, with their weights (each operation's
    :attr:`~.operations.PoolOperation.needs` and ``boosted_by`` read against the
    :func:`~.draw_facts.facts` of ``state``)."""
    # what follows depends on these alone: worked out once for each
    signs = (operations, facts(state, ctx), level.out_of_contract)
    chosen = _WEIGHED.get(signs)
    if chosen is None:
        chosen = _WEIGHED[signs] = _weighed(*signs)
    return chosen


def _weighed(
    operations: frozenset[str], found: frozenset[str], broken: bool
) -> tuple[tuple[str, int], ...]:
    """The drawable operations (in :data:`~.operations.POOL_OPERATIONS`' order) with their
    weights, four times as heavy where a fact ``found`` boosts them; with ``broken``, a rule
    broken too."""
    chosen = [
        (op.name, op.weight * 4 if not op.boosted_by.isdisjoint(found) else op.weight)
        for op in table.POOL_OPERATIONS
        if op.name in operations and op.needs <= found
    ]
    if broken:
        chosen.append((OUT_OF_CONTRACT, 4))
    return tuple(chosen)


#: The kind drawn for an action that breaks a rule (the robustness level).
OUT_OF_CONTRACT = "out_of_contract"

#: :func:`_weighed` by its arguments, as each is first met (a run meets a few dozen).
_WEIGHED: dict[tuple[frozenset[str], frozenset[str], bool], tuple[tuple[str, int], ...]] = {}


def next_action(
    choices: Choices,
    state: PoolState,
    ctx: draw.Context,
    operations: frozenset[str],
    level: Level,
    allowed: Callable[[Action], bool] | None = None,
) -> Action | None:
    """The next action: first its kind (weighted towards the ones that build state), then
    the action itself; at the robustness level sometimes one that breaks a rule. ``None``
    when the broken rule drawn cannot be broken in this state. ``allowed`` says what is
    inside the contract at the levels that stay inside it (default: ``state``'s profile
    allows it; a diff asks both sides')."""
    ctx.observe(state)
    options = kinds(state, ctx, operations, level)
    # Hypothesis draws the first option far more often than its weight says (get_new_blocks
    # took 41% of the steps for a weight of 20%): start the list at a place the pool's
    # state decides, so that no operation always gets that surplus
    start = (sum(state.ref_cnt) + len(state.free_queue) + len(state.cache)) % len(options)
    kind = choices.weighted(options[start:] + options[:start], "operation")
    if kind != OUT_OF_CONTRACT:
        drawn = table.named(kind).draw(choices, state, ctx)
        inside = violation(state, drawn) is None if allowed is None else allowed(drawn)
        if not level.out_of_contract and not inside:
            # The drawers follow the seed's contract; a profile may narrow it (an older
            # release's cache_full_blocks taking no null block, say): such an action is
            # not drawn at the levels that stay inside the contract.
            return None
        if level.consumer is not None and not manager_could_call(state, drawn):
            return None  # the events level: caching calls as a manager makes them
        return drawn
    drawers = [d for op in table.POOL_OPERATIONS if op.name in operations for d in op.bad_draws]
    action = choices.choice(drawers, "broken rule")(choices, state, ctx)
    if action is None or violation(state, action) is None:
        return None
    if not ctx.peer and table.names_peer_blocks(action):
        return None
    return action


def pool_case(
    factory: TargetFactory,
    profile: Profile,
    level: Level,
    max_blocks: int,
    steps: int | None = None,
) -> Start:
    """Test cases of the pool machine at ``level`` for the seeded search: a pool of up to
    ``max_blocks`` blocks drawn, then one action drawn and run in lockstep per step (a
    draw that gives no action, or one the target does not take, counted as skipped).
    Given the ``steps`` of each test case, a target that takes several actions at once is
    told the steps drawn ahead (:mod:`.lookahead`; the run's own draws are the same)."""

    reach = Reach()

    def start(choices: Choices, record: RunRecord) -> Step:
        config = draw.pool_config(choices, max_blocks, level.out_of_contract)
        run = LockstepRun(factory, profile, level, config, record)
        ctx = draw.Context(
            evict_first=run.evict_first, peer=run.peer, for_events=run.events is not None
        )

        def draw_step(choices: Choices, state: PoolState, ctx: draw.Context) -> Action | None:
            action = next_action(choices, state, ctx, run.operations, level)
            return action if action is not None and run.can_apply(action) else None

        if (
            steps
            and isinstance(choices, RandomChoices)
            and getattr(run.target, PLAN, None) is not None
            and reach.ready()
        ):
            return ahead_step(Lookahead(run, level, draw_step, choices, ctx, steps, reach))

        def step(choices: Choices) -> None:
            action = draw_step(choices, run.state, ctx)
            if action is None:
                record.skipped += 1
            else:
                run.apply(action)

        return step

    def ahead_step(ahead: Lookahead) -> Step:
        """The step of a test case drawn ahead of its run (the same draws)."""

        def step(choices: Choices) -> None:
            action = ahead.next()
            if action is None:
                ahead.run.record.skipped += 1
                return
            try:
                ahead.run.apply(action)
            except BaseException:
                ahead.rewind()  # the choices as the run's own draws leave them
                ahead.reach.missed()
                raise

        return step

    return start
